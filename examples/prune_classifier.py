"""Prune the fortune classifier's attention heads and feed-forward units.

Starts from `zoo/fortunes_classifier` (2 layers of 4 heads and 256
feed-forward units) and removes 25%, then 50%, then 75% of all heads and
of all units, each from the last (with --step, in smaller steps): the
importance of every head and unit is measured on training examples
(`keras_tfm.training.head_importance` and `ffn_importance`: the gradient
of the loss by a gate on each output, Michel et al., 2019), the least
important are removed across layers (`least_important`: every layer
keeps a head), the smaller dense model is built (`prune_heads`,
`prune_ffn`), then fine-tuned (up to three epochs at 25/50/75%, one
after an intermediate step) on the labels (with --distill also towards
the unpruned model's softened logits: knowledge distillation), keeping
its epoch of best validation accuracy (or no fine-tuning, if none beats
the pruned model as it was). Every variant is measured on the validation
split and on the same test split (`fortune_splits(seed=0)`, the zoo
card's): accuracy, macro-F1, parameters, `.keras` size and CPU latency of
one compiled
`predict_on_batch` at batch 1 and 32 (median of repeated calls on the
first 32 test texts, padded to the longest), beside the unpruned preset,
its `model.quantize("int8")` and the distilled student of
examples/distill.py (when outputs/distill/student_distilled.keras exists).
Writes results.json to --output, and with --save-preset the 50% model as a
preset.

    python examples/prune_classifier.py              # ~20 min on 2 cores
    python examples/prune_classifier.py --save-preset zoo/fortunes_classifier_pruned
    python examples/prune_classifier.py --distill --step 0.125  # ~16 min
    python examples/prune_classifier.py --quick      # a minute: slices, 1 step
"""

import argparse
import importlib.util
import json
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

# --- Configuration ---------------------------------------------------------
CONFIG = dict(
    preset="fortunes_classifier",
    fractions=[0.25, 0.5, 0.75],  # of all heads and of all units, removed
    step=0.25,  # at most this share of all removed at a time
    step_epochs=1,  # fine-tuning after a step between two `fractions`
    method="gradient",  # or "magnitude"
    importance_examples=2048,  # training examples the importance is read on
    importance_batch_size=4,  # rows of the longest bucket: near per-example
    fine_tune_epochs=3,  # at most; the best validation epoch is kept
    learning_rate=3e-4,  # AdamW peak, linear warm-up then cosine decay
    weight_decay=0.01,
    batch_size=32,
    max_sequence_length=128,
    latency_repeats=30,
    jit_compile="auto",  # Keras' default: XLA where the model allows it
    run_eagerly=False,
    distilled="outputs/distill/student_distilled.keras",
    preset_fraction=0.5,  # the step saved by --save-preset
    # --distill: fine-tune against the unpruned model's softened logits too
    # (keras_tfm.training.Distiller: alpha on the labels, 1 - alpha on it).
    distill=False,
    alpha=0.5,
    temperature=2.0,
    seed=0,
)
# --quick: slices of the splits, one step, one epoch, few repeats.
QUICK = dict(
    fractions=[0.5],
    step=0.5,
    importance_examples=32,
    importance_batch_size=32,
    fine_tune_epochs=1,
    train_examples=128,
    evaluation_examples=64,
    latency_repeats=1,
    jit_compile=False,  # compiling would cost more than the few calls
    run_eagerly=True,  # so would tracing the few training steps
    method="magnitude",  # no gradient to trace (the tests cover "gradient")
)
# ---------------------------------------------------------------------------

_CLASSIFY = Path(__file__).with_name("classify_fortunes.py")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--output", default="outputs/prune_classifier")
    parser.add_argument("--save-preset", default=None,
                        help="e.g. zoo/fortunes_classifier_pruned")  # fmt: skip
    parser.add_argument("--epochs", type=int, default=None)
    parser.add_argument("--method", choices=["gradient", "magnitude"], default=None)
    parser.add_argument("--distill", action="store_true",
                        help="the unpruned model teaches each fine-tuning")  # fmt: skip
    parser.add_argument("--step", type=float, default=None,
                        help="share of heads and units removed at a time")  # fmt: skip
    parser.add_argument("--learning-rate", type=float, default=None,
                        help="the fine-tuning's AdamW peak (default 3e-4)")  # fmt: skip
    parser.add_argument("--fractions", type=float, nargs="+", default=None,
                        help="shares removed (default 0.25 0.5 0.75)")  # fmt: skip
    return parser.parse_args(argv)


if __name__ == "__main__":
    parse_args(sys.argv[1:])  # --help, a bad flag: answered before TensorFlow loads

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402

import keras_tfm  # noqa: E402
from keras_tfm.data.classification import classification_dataset  # noqa: E402
from keras_tfm.datasets.fortunes import fortune_splits  # noqa: E402
from keras_tfm.saving import uncompiled_copy  # noqa: E402
from keras_tfm.training import Distiller, pruning  # noqa: E402
from keras_tfm.training.text_classification import predict_with_labels  # noqa: E402


def _classify_fortunes():
    """The helpers of examples/classify_fortunes.py (slicing, scores)."""
    spec = importlib.util.spec_from_file_location("classify_fortunes", _CLASSIFY)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def shape_of(model):
    """(heads, feed-forward units) over all layers."""
    blocks = model.backbone.transformer_layers
    return (sum(b.self_attention.num_heads for b in blocks),
            sum(b.feed_forward.intermediate_dim for b in blocks))  # fmt: skip


def removal(importance, count):
    """The `count` least important units (normalized, across layers)."""
    total = sum(len(s) for s in importance)
    return pruning.least_important(importance, count / total) if count else {}


def prune_to(model, heads, units, data, method):
    """`model` with heads and units removed until `heads` and `units` remain."""
    have_heads, have_units = shape_of(model)
    if have_heads > heads:
        scores = pruning.head_importance(model, data, method=method)
        model = pruning.prune_heads(model, removal(scores, have_heads - heads))
    if have_units > units:
        scores = pruning.ffn_importance(model, data, method=method)
        model = pruning.prune_ffn(model, removal(scores, have_units - units))
    return model


def file_size(model):
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "model.keras"
        uncompiled_copy(model).save(path)
        return path.stat().st_size


def latencies_ms(models, inputs, repeats, jit_compile="auto"):
    """Median ms of one `predict_on_batch(inputs)` per model, the models timed
    in turn within each round (a load that changes during the run then
    reaches them all alike), each after a warm-up call."""
    copies = {name: uncompiled_copy(model) for name, model in models.items()}
    for model in copies.values():
        model.jit_compile = jit_compile
    times = {name: [] for name in copies}
    for model in copies.values():
        model.predict_on_batch(inputs)  # warm-up: tracing excluded
    for _ in range(repeats):
        for name, model in copies.items():
            start = time.perf_counter()
            model.predict_on_batch(inputs)
            times[name].append(time.perf_counter() - start)
    return {name: 1000 * statistics.median(t) for name, t in times.items()}


def fractions_on_the_way(fractions, step):
    """Every fraction pruned to, in order: `fractions` and, between two of
    them, steps of at most `step`; e.g. [0.25, 0.5] by 0.125 is
    [0.125, 0.25, 0.375, 0.5]."""
    if isinstance(step, bool) or not 0 < step < 1:
        raise ValueError(f"`step` must be in (0, 1). Received: step={step!r}")
    path, last = [], 0.0
    for fraction in fractions:
        count = max(1, math.ceil(round((fraction - last) / step, 9)))
        path += [last + (fraction - last) * (i + 1) / count for i in range(count)]
        last = fraction
    return path


def fine_tune(model, train_ds, validation_ds, evaluate, config, epochs, teacher=None):
    """Fine-tunes `model` in place for at most `epochs`, keeping the best
    validation epoch; keeps the model as it was if no epoch beats it.
    Returns the epoch (0: none). With a `teacher`, the loss also pulls
    towards its softened logits."""
    before = evaluate(model, validation_ds)["accuracy"]
    weights = model.get_weights()
    steps = sum(1 for _ in train_ds) * epochs
    schedule = keras.optimizers.schedules.CosineDecay(
        0.0, decay_steps=max(1, steps - steps // 10),
        warmup_target=config["learning_rate"], warmup_steps=max(1, steps // 10),
    )  # fmt: skip
    optimizer = keras.optimizers.AdamW(schedule, weight_decay=config["weight_decay"])
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    trainer = model if teacher is None else Distiller(teacher, model)
    if teacher is None:
        model.compile(optimizer, loss, metrics=["accuracy"],
                      jit_compile=config["jit_compile"],
                      run_eagerly=config["run_eagerly"])  # fmt: skip
    else:
        trainer.compile(optimizer, metrics=["accuracy"], student_loss_fn=loss,
                        alpha=config["alpha"], temperature=config["temperature"],
                        run_eagerly=config["run_eagerly"])  # fmt: skip
    best = keras.callbacks.EarlyStopping(
        "val_accuracy", mode="max", patience=epochs, restore_best_weights=True
    )
    trainer.fit(train_ds, validation_data=validation_ds, shuffle=False, verbose=2,
                epochs=epochs, callbacks=[best])  # fmt: skip
    if evaluate(model, validation_ds)["accuracy"] <= before:
        model.set_weights(weights)
        return 0
    return best.best_epoch + 1


def table(rows):
    lines = [
        f"{'model':<34} {'heads':>5} {'units':>5} {'params':>9} {'.keras':>8} "
        f"{'val':>6} {'acc':>6} {'F1':>6} {'b=1 ms':>7} {'b=32 ms':>8} {'speed-up':>8}"
    ]
    base = rows["unpruned (zoo)"]["latency_32_ms"]
    for name, row in rows.items():
        heads = "" if row["heads"] is None else row["heads"]
        units = "" if row["units"] is None else row["units"]
        lines.append(
            f"{name:<34} {heads:>5} {units:>5} {row['parameters']:>9,} "
            f"{row['bytes'] / 1e6:>6.2f}MB {row['validation_accuracy']:>6.3f} "
            f"{row['accuracy']:>6.3f} "
            f"{row['macro_f1']:>6.3f} {row['latency_1_ms']:>7.2f} "
            f"{row['latency_32_ms']:>8.2f} {base / row['latency_32_ms']:>7.2f}x"
        )
    return "\n".join(lines)


def main(argv=None):
    args = parse_args(argv)
    config = dict(CONFIG, **(QUICK if args.quick else {}))
    if args.epochs is not None:
        config["fine_tune_epochs"] = args.epochs
    if args.method is not None:
        config["method"] = args.method
    for name in ("step", "learning_rate", "fractions"):
        if getattr(args, name) is not None:
            config[name] = getattr(args, name)
    if args.distill:
        config["distill"] = True
    helpers = _classify_fortunes()
    output = Path(args.output)
    output.mkdir(parents=True, exist_ok=True)
    keras.utils.set_random_seed(config["seed"])
    start = time.time()

    splits = fortune_splits(seed=config["seed"])
    model = keras_tfm.zoo.from_preset(config["preset"])
    if model.class_names != splits["class_names"]:
        raise ValueError(
            f"Preset {config['preset']!r} was trained on other categories than "
            f"the installed fortunes. Received: {model.class_names}"
        )
    train = helpers.slice_split(*splits["train"], config.get("train_examples"), 1)
    count = config.get("evaluation_examples")
    validation = helpers.slice_split(*splits["validation"], count, 2)
    test = helpers.slice_split(*splits["test"], count, 3)
    tokenizer = model.tokenizer

    def dataset(split, shuffle=False, batch_size=config["batch_size"]):
        return classification_dataset(*split, tokenizer, batch_size,
                                      config["max_sequence_length"],
                                      shuffle=shuffle, seed=config["seed"])  # fmt: skip

    train_ds, validation_ds = dataset(train, True), dataset(validation)
    test_ds = dataset(test)
    importance_ds = dataset(
        helpers.slice_split(*train, config["importance_examples"], 5),
        batch_size=config["importance_batch_size"],
    )
    inputs = model.encode_texts(list(test[0][:32]))
    one = {key: value[:1] for key, value in inputs.items()}

    def evaluate(model, data=test_ds):
        logits, labels = predict_with_labels(model, data)
        return helpers.scores(labels, logits.argmax(-1))

    def measure(model, pruned=True):
        heads, units = shape_of(model) if pruned else (None, None)
        return dict(evaluate(model), heads=heads, units=units,
                    validation_accuracy=evaluate(model, validation_ds)["accuracy"],
                    parameters=model.count_params(),
                    bytes=file_size(model))  # fmt: skip

    rows = {"unpruned (zoo)": measure(model)}
    int8 = keras_tfm.zoo.from_preset(config["preset"])
    int8.quantize("int8")
    rows["int8 (model.quantize)"] = measure(int8, pruned=False)
    variants = {"unpruned (zoo)": model, "int8 (model.quantize)": int8}
    if Path(config["distilled"]).is_file():
        student = keras.models.load_model(config["distilled"])
        rows["distilled student (distill.py)"] = measure(student)
        variants["distilled student (distill.py)"] = student
    heads, units = shape_of(model)
    steps, models = [], {}
    current = model
    teacher = model if config["distill"] else None
    for fraction in fractions_on_the_way(config["fractions"], config["step"]):
        step_start = time.time()
        current = prune_to(current, round(heads * (1 - fraction)),
                           round(units * (1 - fraction)), importance_ds,
                           config["method"])  # fmt: skip
        reported = any(math.isclose(fraction, f) for f in config["fractions"])
        if not reported:
            epoch = fine_tune(current, train_ds, validation_ds, evaluate, config,
                              config["step_epochs"], teacher)  # fmt: skip
            seconds = time.time() - step_start
            steps.append(dict(fraction=fraction, seconds=seconds,
                              shape=shape_of(current), epoch=epoch))  # fmt: skip
            print(f"pruned {fraction:.1%}: {shape_of(current)} heads/units "
                  f"(epoch {epoch})", flush=True)  # fmt: skip
            continue
        before = evaluate(current)
        epoch = fine_tune(current, train_ds, validation_ds, evaluate, config,
                          config["fine_tune_epochs"], teacher)  # fmt: skip
        name = f"pruned {fraction:.0%}"
        backbone = current.backbone
        rows[name] = dict(
            measure(current),
            before_fine_tuning=before["accuracy"],
            fine_tune_epoch=epoch,
            heads_per_layer=backbone.num_heads_per_layer,
            units_per_layer=backbone.intermediate_dim_per_layer,
        )
        models[fraction] = variants[name] = current
        steps.append(dict(fraction=fraction, seconds=time.time() - step_start,
                          shape=shape_of(current), epoch=epoch))  # fmt: skip
        after = rows[name]["accuracy"]
        print(f"{name}: {shape_of(current)} heads/units, accuracy "
              f"{before['accuracy']:.3f} before fine-tuning, {after:.3f} after "
              f"(epoch {epoch})", flush=True)  # fmt: skip

    for batch, x in (("1", one), ("32", inputs)):
        timed = latencies_ms(variants, x, config["latency_repeats"],
                             config["jit_compile"])  # fmt: skip
        for name, ms in timed.items():
            rows[name][f"latency_{batch}_ms"] = ms
    print(f"load average {os.getloadavg()[0]:.1f}; inputs: the first 32 test texts, "
          f"{inputs['token_ids'].shape[1]} tokens")  # fmt: skip
    print(table(rows))
    summary = dict(config=config, results=rows, steps=steps,
                   sequence_length=int(inputs["token_ids"].shape[1]),
                   load_average=os.getloadavg()[0],
                   seconds=time.time() - start)  # fmt: skip
    (output / "results.json").write_text(json.dumps(summary, indent=1, default=str))
    if args.save_preset:
        save_preset(models[config["preset_fraction"]], args.save_preset, summary,
                    argv)  # fmt: skip
    print(f"total {summary['seconds']:.0f} s")
    return summary


def save_preset(model, directory, summary, argv):
    name = f"pruned {summary['config']['preset_fraction']:.0%}"
    row, base = summary["results"][name], summary["results"]["unpruned (zoo)"]
    argv = sys.argv[1:] if argv is None else argv
    command = " ".join(["python examples/prune_classifier.py", *argv])
    points = 100 * (round(base["accuracy"], 3) - round(row["accuracy"], 3))
    gap = "within 1 point" if points <= 1 + 1e-9 else f"{points:.1f} points lower"
    teacher = (" and the unpruned model's softened logits"
               if summary["config"]["distill"] else "")  # fmt: skip
    return keras_tfm.zoo.save_preset(
        uncompiled_copy(model),
        directory,
        description=(
            f"`fortunes_classifier` with {summary['config']['preset_fraction']:.0%} "
            f"of its attention heads and feed-forward units removed by "
            f"importance in steps of {summary['config']['step']:.1%}, each "
            f"fine-tuned on the labels{teacher}: {row['heads']} of "
            f"{base['heads']} heads "
            f"({list(row['heads_per_layer'])} per layer) and {row['units']} of "
            f"{base['units']} units ({list(row['units_per_layer'])}), a smaller "
            "dense model (`EncoderBackbone`'s `num_heads_per_layer` and "
            "`intermediate_dim_per_layer`). Test split: accuracy "
            f"{row['accuracy']:.3f}, macro-F1 {row['macro_f1']:.3f} (unpruned "
            f"{base['accuracy']:.3f} / {base['macro_f1']:.3f}: {gap}); "
            f"validation accuracy {row['validation_accuracy']:.3f} (unpruned "
            f"{base['validation_accuracy']:.3f}); CPU latency at "
            f"batch 32 {row['latency_32_ms']:.1f} ms against "
            f"{base['latency_32_ms']:.1f} ms, at batch 1 {row['latency_1_ms']:.1f} "
            f"against {base['latency_1_ms']:.1f} ms (2 shared cores, load "
            f"{summary['load_average']:.1f})."
        ),
        intended_use=(
            "A demonstration of structured pruning on real text, offline; as "
            "`fortunes_classifier`, not for any decision about people."
        ),
        training_data=(
            "As `fortunes_classifier`: Debian's `fortunes` package, "
            "`keras_tfm.datasets.fortune_splits(seed=0)`; importance read on "
            f"{summary['config']['importance_examples']} training entries, "
            "fine-tuned on the training split, the epoch chosen on validation."
        ),
        training_command=f"{command}\n# {summary['seconds']:.0f} s in all",
        overwrite=True,
        usage='model.classify("Real programmers use vi.")',
    )


if __name__ == "__main__":
    main()

"""Distil a fortune classifier into a smaller student.

The teacher is `zoo/fortunes_classifier` (2 layers, width 128); without it
(or with --quick) a teacher is trained here first; with --teacher-logits it
is the fine-tuned MiniLM of `examples/semantic_search.py` (22.6M
parameters, its own tokenizer), whose logits on every split, written there
to teacher_logits.npz, are the soft targets (`Distiller(None, student)`,
offline distillation). The same student (1 layer, width 64, the zoo
classifier's tokenizer) is trained from the same initialization on the hard
labels only and with `keras_tfm.training.Distiller` (teacher logits softened
by T, weighted against the hard-label loss by alpha), each for up to
`epochs` epochs, keeping its epoch of best validation accuracy. Prints test
accuracy and macro-F1 of all; writes results.json and the distilled student
(student_distilled.keras) to --output.

    python examples/distill.py                  # minutes
    python examples/distill.py --sweep          # every (T, alpha) of SWEEP
    python examples/distill.py --quick          # seconds: a slice, 1 epoch

    # The better teacher (about 15 min, then about 8):
    python examples/semantic_search.py --lora-rank 0 --output outputs/minilm
    python examples/distill.py --sweep \
        --teacher-logits outputs/minilm/teacher_logits.npz

With --sweep, one distilled student is trained per (temperature, alpha) of
SWEEP; the one with the best validation accuracy is saved and reported as
"student (distilled)", beside every setting's validation and test scores.
"""

import argparse
import importlib.util
import json
import os
import sys
import time
from pathlib import Path

# --- Configuration ---------------------------------------------------------
CONFIG = dict(
    teacher_preset="fortunes_classifier",
    student=dict(num_layers=1, num_heads=2, hidden_dim=64, intermediate_dim=128),
    alpha=0.3,  # weight of the hard-label loss; 1 - alpha on the teacher's
    temperature=2.0,  # softening of both distributions
    epochs=10,  # at most: each student keeps its best validation epoch
    batch_size=32,
    max_sequence_length=128,
    learning_rate=1e-3,
    dropout=0.1,
    seed=0,
)
# --quick: a slice, a teacher trained here, a tiny student, one epoch.
QUICK = dict(
    teacher_preset=None,
    student=dict(num_layers=1, num_heads=2, hidden_dim=16, intermediate_dim=32),
    teacher=dict(num_layers=1, num_heads=2, hidden_dim=32, intermediate_dim=64),
    vocabulary_size=300,
    max_sequence_length=48,
    epochs=1,
    train_examples=400,
    evaluation_examples=150,
    bucket_lengths=[48],  # one padded shape
    run_eagerly=True,  # tracing 3 short fits would cost more than their steps
)
# --sweep: (temperature, alpha) settings, chosen between on validation.
SWEEP = [(2.0, 0.1), (2.0, 0.5), (5.0, 0.1), (5.0, 0.5), (10.0, 0.1), (10.0, 0.5)]
# ---------------------------------------------------------------------------

_CLASSIFY = Path(__file__).with_name("classify_fortunes.py")


def _classify_fortunes():
    """The helpers of examples/classify_fortunes.py (slicing, scores)."""
    spec = importlib.util.spec_from_file_location("classify_fortunes", _CLASSIFY)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build_student(shape, tokenizer, num_classes, config):
    backbone = keras_tfm.models.EncoderBackbone(
        vocabulary_size=tokenizer.vocabulary_size(),
        max_sequence_length=config["max_sequence_length"],
        num_segments=0,
        dropout=config["dropout"],
        padding_id=tokenizer.token_to_id("[PAD]"),
        **shape,
    )
    preprocessor = keras_tfm.models.TextClassifierPreprocessor(
        tokenizer, sequence_length=config["max_sequence_length"]
    )
    return keras_tfm.models.EncoderClassifier(
        backbone, num_classes, pooling="mean", preprocessor=preprocessor
    )


def best_on_validation(results, names):
    """The name among `names` whose row has the highest validation accuracy
    (the earliest on a tie): chosen without looking at the test split."""
    return max(names, key=lambda name: (results[name]["validation_accuracy"],
                                        -names.index(name)))  # fmt: skip


def saved_teacher_logits(path, splits):
    """The logits of `path` (written by examples/semantic_search.py) per split,
    after checking that its labels are those of `splits`."""
    saved = np.load(path)
    logits = {}
    for name, (_, labels) in splits.items():
        if not np.array_equal(saved[f"{name}_labels"], labels):
            raise ValueError(
                f"The teacher logits of {path} are for another {name} split: "
                "its labels differ from this run's (another fortunes version, "
                "root or seed?)."
            )
        logits[name] = saved[f"{name}_logits"]
    return logits


def with_teacher_logits(texts, labels, logits, make_dataset):
    """`make_dataset(texts, labels)`'s batches with targets `(labels,
    teacher_logits)`: each text's index rides through the bucketing as its
    label and picks both."""
    labels, logits = tf.constant(labels, tf.int32), tf.constant(logits, tf.float32)

    def targets(x, index):
        return x, (tf.gather(labels, index), tf.gather(logits, index))

    return make_dataset(texts, np.arange(len(texts))).map(targets)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--output", default="outputs/distill")
    parser.add_argument("--root", default=None, help="folder of fortune files")
    parser.add_argument(
        "--sweep", action="store_true", help="a student per (T, alpha) of SWEEP"
    )
    parser.add_argument(
        "--teacher-logits",
        default=None,
        help="teacher_logits.npz of examples/semantic_search.py: its fine-tuned "
        "MiniLM teaches (offline)",
    )
    parser.add_argument("--epochs", type=int, default=None)
    return parser.parse_args(argv)


if __name__ == "__main__":
    parse_args(sys.argv[1:])  # --help, a bad flag: answered before TensorFlow loads

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import keras_tfm  # noqa: E402
from keras_tfm.data.classification import classification_dataset  # noqa: E402
from keras_tfm.data.tokenizers import train_word_piece_tokenizer  # noqa: E402
from keras_tfm.datasets.fortunes import fortune_splits  # noqa: E402
from keras_tfm.training import Distiller  # noqa: E402
from keras_tfm.training.text_classification import predict_with_labels  # noqa: E402


def main(argv=None):
    args = parse_args(argv)
    config = dict(CONFIG, **(QUICK if args.quick else {}))
    if args.epochs is not None:
        config["epochs"] = args.epochs
    helpers = _classify_fortunes()
    output = Path(args.output)
    output.mkdir(parents=True, exist_ok=True)
    keras.utils.set_random_seed(config["seed"])
    start = time.time()

    splits = fortune_splits(args.root, seed=config["seed"])
    class_names = splits["class_names"]
    # Each split's slice (--quick): its size and the seed of its permutation.
    slices = {
        "train": (config.get("train_examples"), 1),
        "validation": (config.get("evaluation_examples"), 4),
        "test": (config.get("evaluation_examples"), 3),
    }
    train, validation, test = (
        helpers.slice_split(*splits[name], *slices[name]) for name in slices
    )
    sparse_ce = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    preset = config["teacher_preset"]
    use_preset = bool(preset) and preset in keras_tfm.zoo.list_presets()
    if use_preset:
        if keras_tfm.zoo.preset_labels(preset) != class_names:
            raise ValueError(
                f"Preset {preset!r} was trained on other categories than "
                f"{args.root or 'the installed fortunes'}. Received: "
                f"{keras_tfm.zoo.preset_labels(preset)}"
            )
        teacher = keras_tfm.zoo.from_preset(preset)
        tokenizer = teacher.tokenizer
    else:
        tokenizer = train_word_piece_tokenizer(train[0], config["vocabulary_size"])
        teacher = build_student(config["teacher"], tokenizer, len(class_names), config)
        teacher.compile(
            keras.optimizers.Adam(config["learning_rate"]), sparse_ce,
            run_eagerly=config.get("run_eagerly", False),
        )  # fmt: skip

    def dataset(texts, labels, shuffle=False):
        return classification_dataset(
            texts,
            labels,
            tokenizer,
            config["batch_size"],
            config["max_sequence_length"],
            bucket_lengths=config.get("bucket_lengths"),
            shuffle=shuffle,
            seed=config["seed"],
        )

    train_ds, test_ds = dataset(*train, shuffle=True), dataset(*test)
    validation_ds = dataset(*validation)

    def evaluate(model):
        logits, labels = predict_with_labels(model, test_ds)
        row = helpers.scores(labels, logits.argmax(-1))
        logits, labels = predict_with_labels(model, validation_ds)
        validation_accuracy = helpers.scores(labels, logits.argmax(-1))["accuracy"]
        return dict(row, validation_accuracy=validation_accuracy)

    if args.teacher_logits:
        # Sliced as the splits are: the same permutation of the same length.
        saved = saved_teacher_logits(
            args.teacher_logits, {name: splits[name] for name in slices}
        )
        logits = {}
        for name, split_logits in saved.items():
            sliced, _ = helpers.slice_split(
                list(split_logits), splits[name][1], *slices[name]
            )
            logits[name] = np.asarray(sliced)
        teacher = None
        soft_train_ds = with_teacher_logits(
            *train, logits["train"], lambda *split: dataset(*split, shuffle=True)
        )
        soft_validation_ds = with_teacher_logits(
            *validation, logits["validation"], dataset
        )
        results = {
            "teacher": dict(
                helpers.scores(test[1], logits["test"].argmax(-1)),
                validation_accuracy=helpers.scores(
                    validation[1], logits["validation"].argmax(-1)
                )["accuracy"],
            )
        }
        print(f"teacher: the logits of {args.teacher_logits}")
    else:
        soft_train_ds, soft_validation_ds = train_ds, validation_ds
        if not use_preset:
            teacher.fit(train_ds, epochs=config["epochs"], shuffle=False, verbose=2)
        results = {"teacher": evaluate(teacher)}
        results["teacher"]["parameters"] = teacher.count_params()
        print(f"teacher: {f'preset {preset}' if use_preset else 'trained here'}")

    runs = {"student (hard labels)": None}
    if args.sweep:
        for temperature, alpha in SWEEP:
            runs[f"student (distilled, T={temperature:g}, alpha={alpha:g})"] = (
                temperature,
                alpha,
            )
    else:
        runs["student (distilled)"] = (config["temperature"], config["alpha"])
    students = {}
    for name, setting in runs.items():
        keras.utils.set_random_seed(config["seed"] + 1)  # same initialization
        student = build_student(config["student"], tokenizer, len(class_names), config)
        optimizer = keras.optimizers.Adam(config["learning_rate"])
        if setting is not None:
            trainer = Distiller(teacher, student)
            trainer.compile(
                optimizer,
                metrics=["accuracy"],
                student_loss_fn=sparse_ce,
                alpha=setting[1],
                temperature=setting[0],
                run_eagerly=config.get("run_eagerly", False),
            )
        else:
            trainer = student
            trainer.compile(
                optimizer, sparse_ce, metrics=["accuracy"],
                run_eagerly=config.get("run_eagerly", False),
            )  # fmt: skip
        # Every student keeps its epoch of best validation accuracy.
        best_epoch = keras.callbacks.EarlyStopping(
            "val_accuracy",
            mode="max",
            patience=config["epochs"],
            restore_best_weights=True,
        )
        fit_start = time.time()
        trainer.fit(
            train_ds if setting is None else soft_train_ds,
            validation_data=validation_ds if setting is None else soft_validation_ds,
            epochs=config["epochs"],
            callbacks=[best_epoch],
            shuffle=False,
            verbose=2,
        )
        results[name] = dict(evaluate(student), fit_seconds=time.time() - fit_start)
        results[name]["parameters"] = student.count_params()
        results[name]["best_epoch"] = best_epoch.best_epoch + 1
        students[name] = student
    if args.sweep:
        swept = [name for name, setting in runs.items() if setting is not None]
        chosen = best_on_validation(results, swept)
        print(f"{'setting':<44} {'epoch':>5} {'validation':>10} {'test':>6}")
        for name in ["student (hard labels)", *swept]:
            row = results[name]
            scores = f"{row['validation_accuracy']:>10.3f} {row['accuracy']:>6.3f}"
            print(f"{name:<44} {row['best_epoch']:>5} {scores}")
        print(f"chosen on validation accuracy: {chosen}")
        results["student (distilled)"] = dict(results[chosen], setting=chosen)
        students["student (distilled)"] = students[chosen]

    print(helpers.table(results))
    students["student (distilled)"].save(output / "student_distilled.keras")
    summary = {
        "config": config,
        "results": results,
        "seconds": time.time() - start,
    }
    (output / "results.json").write_text(json.dumps(summary, indent=2, default=str))
    print(f"total {summary['seconds']:.1f} s")
    return summary


if __name__ == "__main__":
    main()

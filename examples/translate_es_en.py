"""Train a Spanish -> English Transformer on two verse-aligned Bibles.

Data: the Reina-Valera 1909 (Spanish) and the World English Bible, Debian's
SWORD modules read with `pysword` (`keras_tfm.datasets.sword_parallel`:
markup cleaned, verses aligned by reference). Whole books are held out:
test Ruth, Jonah, Philippians, James and 1 John (449 verses), validation
Esther, Micah and Colossians (367); the other 30,249 pairs train. A shared
Spanish+English WordPiece vocabulary is learned on the training verses (by
HuggingFace's trainer: seconds) and attached to the model. After each epoch
the run records the validation loss and the greedy BLEU of the first
validation verses (the learning curves, plotted to
docs/images/translator_es_en_curves.png) and keeps the lowest-loss model in
the run folder (`best.keras`), so a run stopped early still leaves its best
model. The test books are then translated greedily and scored with sacrebleu
beside the baseline on the same verses: IBM Model 1
(`keras_tfm.baselines.ibm_model1_translator`) learned on the same training
verses, translating word by word.

    apt-get install -y sword-text-sparv sword-text-web
    pip install pysword sacrebleu
    python examples/translate_es_en.py --steps 8000 --epochs 40 \\
        --max-minutes 64      # writes runs/es_en; the cosine spans the 64 min
    python examples/translate_es_en.py --init runs/es_en --run-dir runs/es_en2 \\
        --dropout 0.25 --learning-rate 1e-3 --steps 8000 --epochs 40 \\
        --max-minutes 55      # a second cosine from the first's best, more dropout
    python examples/translate_es_en.py --checkpoint runs/es_en2 \\
        --num-beams 4          # score the best model, greedy and beam search
    python examples/translate_es_en.py --checkpoint runs/es_en2 --num-beams 4 \\
        --save zoo/translator_es_en    # ... and write the preset
    python examples/translate_es_en.py --quick      # a small slice, < 1 minute

`--init` also takes a saved preset's folder (`--init zoo/translator_es_en`
trains the shipped model on). The card of a saved preset lists every
command that made its model, four runs for the shipped one (each run folder
keeps them in `commands.txt`).
"""

import argparse
import json
import math
import os
import re
import shlex
import sys
import time
from pathlib import Path

# --- Configuration ------------------------------------------------------------
FULL = dict(
    vocabulary_size=8000,  # requested WordPiece size, shared by both languages
    train_pairs=None,  # all training verses
    test_pairs=None,  # all 449 test verses
    max_length=128,  # tokens per side, with [START]/[END]
    # Sized for an hour on 2 busy cores: d 192 (4.65M parameters) got 3.5
    # passes in 51 min and stopped under-trained (BLEU 11.5); d 128 costs about
    # half the FLOPs a token (2.4M multiply-adds a token pair against 4.6M), so
    # twice the passes in the same time.
    model=dict(
        num_encoder_layers=3,
        num_decoder_layers=3,
        num_heads=4,
        hidden_dim=128,
        intermediate_dim=512,
        dropout=0.1,
        activation="gelu",
        normalize_first=True,
    ),
    batch_size=128,
    tokens_per_batch=4096,
    bucket_boundaries=(16, 24, 32, 40, 48, 64, 80, 96),
    # float32 without XLA: at this width mixed_bfloat16 gains little (d 128:
    # 0.45 against 0.48 s a step at load 3; d 192: 0.97 against 1.08, and
    # 2.48 against 2.43 at load 10) and XLA recompiles for every bucket shape
    # (35 s each): benchmarks/translate_es_en_steps.py. d 128 steps are 2.2x
    # cheaper than d 192's (0.48 against 1.08 s, float32, load 3).
    device_defaults=False,
    steps=3000,  # optimizer steps, in `epochs` equal parts (with
    epochs=15,  # --max-minutes: steps a checkpoint is steps // epochs)
    learning_rate=2e-3,
    warmup_steps=100,
    label_smoothing=0.1,
    curve_verses=64,  # validation verses translated after each epoch
)
QUICK = dict(
    FULL,
    vocabulary_size=600,
    train_pairs=400,
    test_pairs=16,
    max_length=48,
    bucket_boundaries=(),
    batch_size=32,
    tokens_per_batch=None,
    model=dict(
        num_encoder_layers=1,
        num_decoder_layers=1,
        num_heads=2,
        hidden_dim=32,
        intermediate_dim=64,
        dropout=0.1,
    ),
    device_defaults=False,
    steps=20,
    epochs=2,
    warmup_steps=4,
    curve_verses=8,
)
SEED = 0
PRESET = "zoo/translator_es_en"
CURVES = "docs/images/translator_es_en_curves.png"
BASELINE = "IBM Model 1"
COMMANDS = "commands.txt"  # in a run folder: the commands that trained it
GOAL = dict(bleu=28.0, chrf=55.0)  # issue 43, on the test books
# ------------------------------------------------------------------------------


def dropout_rate(text):
    """argparse type of --dropout: a rate in [0, 1) (1 would drop everything)."""
    value = float(text)
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"must be in [0, 1): {value}")
    return value


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a small slice, < 1 min")
    parser.add_argument(
        "--max-minutes",
        type=float,
        help="the training budget: the learning rate's cosine decays over "
        "these minutes of wall time (not over --steps, then only a cap) and "
        "training stops when they are spent",
    )
    parser.add_argument(
        "--run-dir",
        default="runs/es_en",
        help="the run's folder: tokenizer, best.keras, history.json",
    )
    parser.add_argument(
        "--checkpoint",
        metavar="RUN_DIR",
        help="train nothing: score the best model of an earlier run's folder",
    )
    parser.add_argument(
        "--steps", type=int, help="optimizer steps (the schedule's length)"
    )
    parser.add_argument("--epochs", type=int, help="checkpoints over the steps")
    parser.add_argument("--learning-rate", type=float, help="the schedule's peak")
    parser.add_argument("--warmup-steps", type=int, help="steps up to the peak")
    parser.add_argument(
        "--dropout",
        type=dropout_rate,
        help="override the model's dropout rate (with --init too: the earlier "
        "run's weights, trained on at this rate)",
    )
    parser.add_argument(
        "--init",
        metavar="RUN_DIR",
        help="start from an earlier run's best model and vocabulary, or from a "
        "saved preset's (its history comes first in the curves): a second, "
        "fresh schedule",
    )
    parser.add_argument(
        "--num-beams",
        type=int,
        default=1,
        help="also translate the test books with beam search of this width "
        "(length penalty 0.6)",
    )
    parser.add_argument("--sword-path", default="/usr/share/sword")
    parser.add_argument(
        "--save", help=f"write the best model as a preset folder (e.g. {PRESET})"
    )
    parser.add_argument("--plot", default=CURVES, help="the learning curves' image")
    return parser.parse_args(argv)


if __name__ == "__main__":
    parse_args(sys.argv[1:])  # --help, a bad flag: answered before TensorFlow loads

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(Path(__file__).parent))  # the German example's helpers

import keras  # noqa: E402
import sacrebleu  # noqa: E402
from translate_de_en import build_model, score, translate  # noqa: E402

from keras_tfm import baselines, saving, training  # noqa: E402
from keras_tfm.data import translation  # noqa: E402
from keras_tfm.datasets import sword_parallel  # noqa: E402


class ValidationBLEU(keras.callbacks.Callback):
    """After each epoch: greedy BLEU and chrF of the first validation verses,
    added to the epoch's logs (and so to the history)."""

    def __init__(self, pairs):
        super().__init__()
        self.pairs = pairs

    def on_epoch_end(self, epoch, logs=None):
        hypotheses = translate(self.model, [es for es, _ in self.pairs])
        scores = score(hypotheses, [en for _, en in self.pairs])
        logs["val_bleu"], logs["val_chrf"] = scores["bleu"], scores["chrf"]
        print(f"epoch {epoch + 1}: validation greedy BLEU {scores['bleu']:.2f}, "
              f"chrF {scores['chrf']:.2f}, e.g. {hypotheses[0]!r}")  # fmt: skip


class WallClockCosine(keras.optimizers.schedules.LearningRateSchedule):
    """A linear warm-up over `warmup_steps`, then a cosine from `peak` to 0
    over a wall-clock budget rather than a step count: `spent`, the fraction
    of the budget used (set by `SpendBudget` before each step), is the
    cosine's clock. On a shared machine whose speed changes by the minute,
    a run of `minutes` then ends annealed, whatever steps it managed."""

    def __init__(self, peak, warmup_steps, minutes):
        self.peak, self.warmup_steps, self.minutes = peak, warmup_steps, minutes
        self.spent = keras.Variable(0.0, trainable=False, name="budget_spent")

    def __call__(self, step):
        ops = keras.ops
        warmup = ops.minimum(1.0, (ops.cast(step, "float32") + 1) / self.warmup_steps)
        cosine = 0.5 * (1 + ops.cos(math.pi * ops.minimum(self.spent, 1.0)))
        return self.peak * warmup * cosine

    def get_config(self):
        return dict(
            peak=self.peak, warmup_steps=self.warmup_steps, minutes=self.minutes
        )


class SpendBudget(keras.callbacks.Callback):
    """Moves `schedule.spent` (a `WallClockCosine`) before each step and
    stops training after the step that spends the budget (the epoch is then
    validated and checkpointed as usual)."""

    def __init__(self, schedule):
        super().__init__()
        self.schedule = schedule

    def on_train_begin(self, logs=None):
        self.began = time.time()

    def fraction(self):
        return (time.time() - self.began) / (60 * self.schedule.minutes)

    def on_train_batch_begin(self, batch, logs=None):
        self.schedule.spent.assign(min(1.0, self.fraction()))

    def on_train_batch_end(self, batch, logs=None):
        if self.fraction() >= 1 and not self.model.stop_training:
            print(f"Time budget of {self.schedule.minutes} min spent "
                  f"after {self.model.optimizer.iterations.numpy()} steps")  # fmt: skip
            self.model.stop_training = True


class HistoryFile(keras.callbacks.Callback):
    """Writes the logs so far to `path` (JSON) after each epoch, so that a
    run stopped early keeps its learning curves."""

    def __init__(self, path):
        super().__init__()
        self.path = Path(path)
        self.history = {}

    def on_epoch_end(self, epoch, logs=None):
        for name, value in (logs or {}).items():
            self.history.setdefault(name, []).append(float(value))
        saving.atomic_write_text(self.path, json.dumps(self.history, indent=1))


def vocabulary(config, run_dir, train_pairs):
    """The shared WordPiece tokenizer, read from the run folder of an earlier
    start, or learned on the training verses (both languages) by
    HuggingFace's WordPiece trainer and written there."""
    import keras_hub

    path = run_dir / "vocabulary.txt"
    if path.is_file():
        return keras_hub.tokenizers.WordPieceTokenizer(
            vocabulary=path.read_text(encoding="utf-8").splitlines(),
            lowercase=False,
            strip_accents=False,
            oov_token="[UNK]",
            special_tokens=[t for t in translation.SPECIAL_TOKENS if t != "[UNK]"],
            name="tokenizer",
        )
    tick = time.time()
    tokenizer = translation.train_translation_tokenizer(
        [s for pair in train_pairs for s in pair],
        config["vocabulary_size"],
        learner="huggingface",  # seconds; keras-hub's learner took 842 s
    )
    print(f"WordPiece vocabulary: {tokenizer.vocabulary_size()} tokens "
          f"({time.time() - tick:.0f} s)")  # fmt: skip
    saving.atomic_write_text(path, "\n".join(tokenizer.get_vocabulary()))
    return tokenizer


def train(config, args, train_pairs, validation):
    """Trains in `args.run_dir`; returns the best model and the history."""
    run_dir = Path(args.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    init = Path(args.init) if args.init else None
    if init:  # the earlier model, and the vocabulary its embeddings learned
        previous, earlier_history = load_run(init)  # sets float32 globally
        words = previous.preprocessor.tokenizer.get_vocabulary()
        saving.atomic_write_text(run_dir / "vocabulary.txt", "\n".join(words))
    tokenizer = vocabulary(config, run_dir, train_pairs)
    datasets = [
        translation.translation_dataset(
            split,
            tokenizer,
            config["batch_size"],
            config["max_length"],
            shuffle,
            SEED,
            config["bucket_boundaries"],
            config["tokens_per_batch"],
        )  # fmt: skip
        for split, shuffle in ((train_pairs, True), (validation, False))
    ]
    if config["device_defaults"]:
        keras.config.set_dtype_policy(training.device_defaults().dtype_policy)
    schedule, budget = None, []
    if args.max_minutes:  # the cosine runs on the clock, the steps only cap
        schedule = WallClockCosine(
            config["learning_rate"], config["warmup_steps"], args.max_minutes
        )
        budget = [SpendBudget(schedule)]
    model = build_model(config, tokenizer, schedule=schedule)
    history = HistoryFile(run_dir / "history.json")
    if init:
        model.set_weights(previous.get_weights())
        history.history = earlier_history
        print(f"Starting from {init}")
    print(
        f"Seq2SeqLM: {model.count_params():,} parameters, "
        f"{keras.config.dtype_policy().name}; {len(datasets[0])} batches a pass "
        f"over the training verses; {config['steps']} steps planned"
    )
    (run_dir / "config.json").write_text(json.dumps(config, indent=1))
    saving.atomic_write_text(
        run_dir / COMMANDS, "\n".join([*commands_of(init), args.command])
    )
    tick = time.time()
    model.fit(
        datasets[0].repeat(),
        steps_per_epoch=config["steps"] // config["epochs"],
        validation_data=datasets[1],
        epochs=config["epochs"],
        callbacks=[
            ValidationBLEU(validation[: config["curve_verses"]]),
            training.BestModelCheckpoint(run_dir),
            history,
            *budget,
        ],
        shuffle=False,  # the training dataset shuffles itself
        verbose=2,
    )
    print(f"Training: {time.time() - tick:.0f} s")
    return load_run(run_dir)


def commands_of(run_dir):
    """The commands that trained a run folder's model, first to last (one
    per `--init` generation), or none if it has no record. A preset folder's
    are the lines of its card's "How it was trained" block."""
    if run_dir is None:
        return []
    path = Path(run_dir, COMMANDS)
    if path.is_file():
        return path.read_text(encoding="utf-8").splitlines()
    card = Path(run_dir, "README.md")
    if not card.is_file():
        return []
    block = re.search(r"## How it was trained\s*```\n(.*?)```", card.read_text(), re.S)
    return block.group(1).splitlines() if block else []


def load_run(run_dir):
    """The best model of a run folder (float32) and its history; or a saved
    preset's model and history (a folder with no best.keras)."""
    keras.config.set_dtype_policy("float32")
    run_dir = Path(run_dir)
    if not (run_dir / "best.keras").is_file() and (run_dir / "config.json").is_file():
        from keras_tfm.zoo.catalogue import build_from_directory

        model = build_from_directory(run_dir)
    else:
        model = saving.uncompiled_copy(
            saving.load_model(run_dir / "best.keras", compile=False),
            dtype="float32",
        )
    history = json.loads((run_dir / "history.json").read_text())
    return model, history


def plot_curves(history, path, baseline):
    """Validation loss and validation BLEU per epoch, the baseline's test BLEU
    as a line for scale."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    epochs = range(1, len(history["val_loss"]) + 1)
    figure, (left, right) = plt.subplots(1, 2, figsize=(9, 3.4))
    left.plot(epochs, history["loss"], label="training (dropout on)")
    left.plot(epochs, history["val_loss"], label="validation books")
    left.set(xlabel="epoch", ylabel="loss (label-smoothed 0.1)", title="Loss")
    left.legend()
    right.plot(epochs, history["val_bleu"], marker="o", label="model, greedy")
    right.axhline(baseline, color="grey", ls="--", label=f"{BASELINE} (test books)")
    right.axhline(GOAL["bleu"], color="green", ls=":", label="goal (test books)")
    right.set(xlabel="epoch", ylabel="BLEU", title="Validation verses, BLEU")
    right.legend()
    figure.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=90)
    print(f"Learning curves: {path}")


def results_table(results, num_verses):
    lines = [f"{f'test books, {num_verses} verses':<34} {'BLEU':>6} {'chrF':>6}"]
    for name, r in results.items():
        label = f"baseline: {BASELINE}" if name == BASELINE else f"model, {name}"
        lines.append(f"{label:<34} {r['bleu']:>6.2f} {r['chrf']:>6.2f}")
    return "\n".join(lines)


def main(argv=None):
    args = parse_args(argv)
    run_as = sys.argv[1:] if argv is None else argv  # for the run folder, the card
    args.command = shlex.join(["python", "examples/translate_es_en.py", *run_as])
    config = dict(QUICK if args.quick else FULL)
    for name in ("steps", "epochs", "learning_rate", "warmup_steps"):
        config[name] = getattr(args, name) or config[name]
    if args.dropout is not None:
        config["model"] = dict(config["model"], dropout=args.dropout)
    keras.utils.set_random_seed(SEED)
    began = time.time()
    verses = sword_parallel.load_parallel_verses(args.sword_path)
    train_pairs, validation, test = sword_parallel.split_parallel_verses(verses)
    train_pairs = train_pairs[: config["train_pairs"]]
    test = test[: config["test_pairs"]]
    print(f"{len(verses)} verse pairs: {len(train_pairs)} train, "
          f"{len(validation)} validation, {len(test)} test")  # fmt: skip
    if args.checkpoint:
        model, history = load_run(args.checkpoint)
    else:
        model, history = train(config, args, train_pairs, validation)

    sources, references = [es for es, _ in test], [en for _, en in test]
    results, samples = {}, {}
    tick = time.time()
    samples["greedy"] = translate(model, sources)
    results["greedy"] = score(samples["greedy"], references)
    print(f"test greedy: {results['greedy']} ({time.time() - tick:.0f} s)")
    if args.num_beams > 1:
        tick, name = time.time(), f"beam{args.num_beams}"
        samples[name] = translate(
            model, sources, num_beams=args.num_beams, length_penalty=0.6
        )
        results[name] = score(samples[name], references)
        print(f"test {name}: {results[name]} ({time.time() - tick:.0f} s)")
    tick = time.time()
    ibm = baselines.ibm_model1_translator(train_pairs)
    samples[BASELINE] = ibm(sources)
    results[BASELINE] = score(samples[BASELINE], references)
    print(f"test {BASELINE}: {results[BASELINE]} ({time.time() - tick:.0f} s)")
    for i in range(0, len(test), max(1, len(test) // 6)):
        print(f"\n  ES:     {sources[i]}\n  REF:    {references[i]}")
        for name, hypotheses in samples.items():
            print(f"  {name + ':':12}{hypotheses[i]}")
    print(f"\n{results_table(results, len(test))}")
    if args.plot and not args.quick:
        plot_curves(history, args.plot, results[BASELINE]["bleu"])
    if args.save:
        save(model, config, args, (verses, train_pairs, validation, test), results,
             history)  # fmt: skip
    print(f"\nTotal wall time: {time.time() - began:.0f} s")
    return results


def versus_baseline(results):
    """Each decoding's BLEU and chrF minus the baseline's, and whether the
    goal is reached: a sentence of the model card."""
    base = results[BASELINE]
    differences = "; ".join(
        f"{name} BLEU {r['bleu'] - base['bleu']:+.2f}, "
        f"chrF {r['chrf'] - base['chrf']:+.2f}"
        for name, r in results.items()
        if name != BASELINE
    )
    reached = any(
        r["bleu"] >= GOAL["bleu"] and r["chrf"] >= GOAL["chrf"]
        for name, r in results.items()
        if name != BASELINE
    )
    return (
        f"Against the baseline ({BASELINE}): {differences} (a minus: behind it). "
        f"The goal, BLEU >= {GOAL['bleu']:g} and chrF >= {GOAL['chrf']:g} on "
        f"the test books, is {'reached' if reached else 'not reached'}."
    )


def save(model, config, args, splits, results, history):
    """The preset, float16-rounded if greedy test BLEU stays within 0.3."""
    from keras_tfm.zoo import save_preset

    verses, train_pairs, validation, test = splits
    originals = [v.numpy() for v in model.weights]
    for variable, value in zip(model.weights, originals, strict=True):
        variable.assign(value.astype("float16").astype(value.dtype))
    rounded = score(translate(model, [es for es, _ in test]), [en for _, en in test])
    print(f"test greedy with float16-rounded weights: {rounded}")
    storage = "float16"
    if rounded["bleu"] < results["greedy"]["bleu"] - 0.3:
        storage, rounded = "float32", results["greedy"]
        for variable, value in zip(model.weights, originals, strict=True):
            variable.assign(value)
    shape = config["model"]
    curve = ", ".join(
        f"{loss:.3f} / {bleu:.1f}"
        for loss, bleu in zip(history["val_loss"], history["val_bleu"], strict=True)
    )
    metrics = "\n".join(
        f"| {'baseline: ' if name == BASELINE else 'model, '}{name} "
        f"| {r['bleu']:.2f} | {r['chrf']:.2f} |"
        for name, r in results.items()
    )
    save_preset(
        model,
        args.save,
        description=(
            "A Spanish -> English Transformer (encoder-decoder, "
            f"{shape['num_encoder_layers']}+{shape['num_decoder_layers']} layers, "
            f"d={shape['hidden_dim']}, up to {config['max_length']} tokens a "
            "side) trained on verse pairs of the Reina-Valera 1909 and the World "
            "English Bible, with its shared WordPiece tokenizer "
            f"({model.vocabulary_size} tokens, [PAD]=0, [UNK]=1, [START]=2, "
            f"[END]=3) attached. Weights stored as {storage} values.\n\n"
            f"| test books ({len(test)} verses) | BLEU | chrF |\n|---|---|---|\n"
            f"{metrics}\n\n{versus_baseline(results)} "
            f"Greedy with the weights as stored: BLEU {rounded['bleu']:.2f}, chrF "
            f"{rounded['chrf']:.2f} (sacrebleu {sacrebleu.__version__}, default "
            "13a tokenization, one reference: the WEB). The baseline is IBM Model "
            "1 learned on the same training verses, translating word by word. "
            f"Validation loss / greedy BLEU of the first {config['curve_verses']} "
            f"validation verses after each epoch: {curve}. Curves: "
            f"docs/images/{Path(CURVES).name}."
        ),
        intended_use=(
            "Demonstrations and tests of keras-tfm's encoder-decoder model on a "
            "real parallel corpus. It knows the vocabulary and style of one "
            "Bible translation pair; it is not a general Spanish translator."
        ),
        training_data=(
            "Debian packages `sword-text-sparv` (Reina-Valera 1909) and "
            "`sword-text-web` (World English Bible), public domain, read with "
            "pysword by `keras_tfm.datasets.sword_parallel` (OSIS markup and "
            f"footnotes removed): {len(verses)} aligned verse pairs. Test books "
            "Ruth, Jonah, Philippians, James, 1 John; validation books Esther, "
            f"Micah, Colossians; training: the {len(train_pairs)} pairs of the "
            "other books whose sides are plausibly translations of each other."
        ),
        training_command="\n".join(
            commands_of(args.checkpoint or args.run_dir)
            + ([args.command] if args.checkpoint else [])
        ),
        overwrite=True,
        usage='model.generate("En el principio crió Dios los cielos y la '
        'tierra.", max_new_tokens=24)',
        weights_dtype=storage,
    )
    Path(args.save, "history.json").write_text(json.dumps(history, indent=1))
    print(f"Saved the preset to {args.save} ({storage} weights)")


if __name__ == "__main__":
    sys.exit(0 if main() else 1)

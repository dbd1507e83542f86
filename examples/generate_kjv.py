"""Train a byte-level GPT on the whole King James Bible and sample from it.

Data: the 31,102 verses of Debian's `bible-kjv` package (one verse a line,
about 4.1 MB), read through its `bible` command. The last 5% of the text (in
order: Hebrews to Revelation, so no verse straddles the split) is held out
for validation. Tokens are bytes (keras-hub `ByteTokenizer`, attached to the
model), so the reported loss and perplexity are per byte.

    apt-get install -y bible-kjv
    python examples/generate_kjv.py              # full run, about an hour
    python examples/generate_kjv.py --quick      # a small slice, < 1 minute
    python examples/generate_kjv.py --save zoo/kjv_gpt
"""

import argparse
import math
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import keras_hub  # noqa: E402

from keras_tfm import baselines, training  # noqa: E402
from keras_tfm.data import language_model_datasets  # noqa: E402
from keras_tfm.datasets.bible import load_bible  # noqa: E402
from keras_tfm.models import CausalLM  # noqa: E402

# --- Configuration ------------------------------------------------------------
FULL = dict(
    characters=None,  # the whole text
    sequence_length=256,  # bytes per training window
    model=dict(
        num_layers=6,
        num_heads=4,
        hidden_dim=256,
        intermediate_dim=1024,
        position_encoding="rotary",
        dropout=0.05,  # about 4 passes over the data: a little regularization
    ),
    batch_size=32,
    epochs=10,
    steps_per_epoch=200,  # 10 x 200 x 32 x 256 bytes = 16.4 MB, ~4 passes
    validation_steps=None,  # all validation windows
    learning_rate=2e-3,
    device_defaults=True,  # the dtype policy and XLA setting fastest here
)
QUICK = dict(
    FULL,
    characters=100_000,
    sequence_length=64,
    model=dict(num_layers=1, num_heads=2, hidden_dim=32, intermediate_dim=64),
    epochs=1,
    steps_per_epoch=20,
    # float32 without XLA: compiling costs more than it saves on a few steps.
    device_defaults=False,
)
PROMPTS = ["In the beginning", "And Jesus said unto them,", "The LORD is my"]
SEED = 0
VALIDATION_FRACTION = 0.05  # the last 5% of the text, in order
# ------------------------------------------------------------------------------


class TimeBudget(keras.callbacks.Callback):
    """Stops training at the end of the first epoch past `minutes` (None: never)."""

    def __init__(self, minutes):
        super().__init__()
        self.minutes = minutes

    def on_train_begin(self, logs=None):
        self.began = time.time()

    def on_epoch_end(self, epoch, logs=None):
        self.epochs = epoch + 1
        if self.minutes and time.time() - self.began > 60 * self.minutes:
            print(f"Time budget of {self.minutes} min reached after {epoch + 1} epochs")
            self.model.stop_training = True


def learning_curve(history):
    """Train and validation loss per epoch, as a table."""
    lines = [f"{'epoch':>5} {'train nats/byte':>16} {'val nats/byte':>14}"]
    pairs = zip(history["loss"], history["val_loss"], strict=True)
    for epoch, (train, val) in enumerate(pairs):
        lines.append(f"{epoch + 1:>5} {train:>16.4f} {val:>14.4f}")
    return "\n".join(lines)


def baseline_table(results):
    """The model's validation loss beside the compressors', in nats and bits."""
    rows = {
        "model (CausalLM)": results["val_loss_per_byte"],
        "bzip2 -9 given the training text": results["bzip2_nats_per_byte"],
        "xz -9e given the training text": results["xz_nats_per_byte"],
    }
    lines = [
        f"{'validation bytes, model vs baseline':<36} {'nats/byte':>9} {'bits':>6}"
    ]
    for name, nats in rows.items():
        lines.append(f"{name:<36} {nats:>9.4f} {nats / math.log(2):>6.3f}")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a small slice, < 1 min")
    parser.add_argument("--epochs", type=int, help="override the configured epochs")
    parser.add_argument(
        "--max-minutes",
        type=float,
        help="stop training after the first epoch that ends past this budget",
    )
    parser.add_argument("--save", help="write the model as a preset folder")
    args = parser.parse_args(argv)
    config = dict(QUICK if args.quick else FULL)
    if args.epochs:
        config["epochs"] = args.epochs
    keras.utils.set_random_seed(SEED)
    began = time.time()
    jit_compile = False
    if config["device_defaults"]:
        defaults = training.device_defaults()
        keras.config.set_dtype_policy(defaults.dtype_policy)
        jit_compile = defaults.jit_compile
        print(f"Device defaults: {defaults.dtype_policy}, jit_compile={jit_compile}")

    text = load_bible()[: config["characters"]]
    tokenizer = keras_hub.tokenizers.ByteTokenizer(lowercase=False, name="tokenizer")
    train, validation = language_model_datasets(
        text,
        tokenizer,
        config["sequence_length"],
        config["batch_size"],
        validation_fraction=VALIDATION_FRACTION,
        seed=SEED,
    )
    print(f"KJV: {len(text):,} characters, {len(text.splitlines()):,} verses")
    model = CausalLM(
        vocabulary_size=tokenizer.vocabulary_size(),
        max_sequence_length=config["sequence_length"],
        tokenizer=tokenizer,
        **config["model"],
    )
    schedule = keras.optimizers.schedules.CosineDecay(
        0.0,
        config["epochs"] * config["steps_per_epoch"],
        warmup_target=config["learning_rate"],
        warmup_steps=100 if not args.quick else 2,
    )
    model.compile(
        optimizer=keras.optimizers.AdamW(schedule, weight_decay=0.01),
        loss=training.TokenCrossEntropy(),
        metrics=[training.TokenAccuracy()],
        jit_compile=jit_compile,
    )
    print(f"CausalLM: {model.count_params():,} parameters")
    tick = time.time()
    history = model.fit(
        train.repeat(),
        epochs=config["epochs"],
        steps_per_epoch=config["steps_per_epoch"],
        validation_data=validation,  # each epoch: the learning curve
        validation_steps=config["validation_steps"],
        callbacks=[TimeBudget(args.max_minutes)],
        shuffle=False,  # the dataset shuffles itself
        verbose=2,
    )
    print(f"Training: {time.time() - tick:.0f} s")
    curve = learning_curve(history.history)
    print(curve)
    loss, accuracy = model.evaluate(
        validation, steps=config["validation_steps"], verbose=0
    )
    results = {
        "val_loss_per_byte": round(loss, 4),
        "val_perplexity_per_byte": round(math.exp(loss), 3),
        "val_bits_per_byte": round(loss / math.log(2), 3),
        "val_byte_accuracy": round(accuracy, 4),
    }
    print("validation:", results)
    # The same held-out bytes, coded by a compressor that has read the
    # training bytes: the floor a language model has to clear.
    for compressor in ("bzip2", "xz"):
        results[f"{compressor}_nats_per_byte"] = round(
            baselines.held_out_nats_per_byte(
                text, config["sequence_length"], VALIDATION_FRACTION, compressor
            ),
            4,
        )
    print(baseline_table(results))

    samples = model.generate(
        PROMPTS, max_new_tokens=config["sequence_length"] - 32, sampler="top_k",
        top_k=10, seed=SEED,
    )  # fmt: skip
    for sample in samples:
        print(f"\n> {sample}")
    greedy = model.generate(PROMPTS[0], max_new_tokens=48)
    print(f"\ngreedy> {greedy}")

    if args.save:
        config["epochs"] = len(history.history["loss"])  # as run (time budget)
        results = save(model, config, args, text, results, samples, curve, validation)
    print(f"\nTotal wall time: {time.time() - began:.0f} s")
    return results


def save(model, config, args, text, results, samples, curve, validation):
    from keras_tfm.zoo import save_preset

    # A fresh copy without the optimizer (Adam's state is twice the weights
    # again), in float32 whatever the training policy: it runs on any device.
    model_config = {**model.get_config(), "tokenizer": model.tokenizer}
    model_config["dtype"] = "float32"
    weights = model.get_weights()
    model = type(model).from_config(model_config)

    # float16-rounded weights halve the file; kept if the held-out loss stays
    # within 0.002 nats/byte of the trained weights'.
    model.set_weights([w.astype("float16").astype(w.dtype) for w in weights])
    model.compile(loss=training.TokenCrossEntropy())
    rounded = model.evaluate(validation, steps=config["validation_steps"], verbose=0)
    print(f"validation loss with float16-rounded weights: {rounded:.4f}")
    storage = (
        "float16" if rounded <= results["val_loss_per_byte"] + 0.002 else "float32"
    )
    if storage == "float32":
        model.set_weights(weights)
        rounded = results["val_loss_per_byte"]
    results = {
        **results,
        "stored_weights": storage,
        "val_loss_per_byte_as_stored": round(rounded, 4),
    }

    tokens = config["epochs"] * config["steps_per_epoch"] * config["batch_size"]
    tokens *= config["sequence_length"]
    save_preset(
        model,
        args.save,
        description=(
            f"A byte-level GPT ({config['model']['num_layers']} layers, d="
            f"{config['model']['hidden_dim']}, context "
            f"{config['sequence_length']} bytes) trained on the King James "
            "Bible, with its keras-hub `ByteTokenizer` attached: "
            "`model.generate('In the beginning', max_new_tokens=64, "
            "sampler='top_k', top_k=10)` returns text.\n\n"
            "| validation (last 5% of the text, per byte) | value |\n|---|---|\n"
            + "\n".join(f"| {k} | {v} |" for k, v in results.items())
            + f"\n\nLearning curve:\n\n```\n{curve}\n```"
            + "\n\nA sample (top-k 10):\n\n> "
            + samples[0].replace("\n", " ")
        ),
        intended_use=(
            "Demonstrations and tests of keras-tfm's CausalLM, generation and "
            "presets. It imitates the spelling and rhythm of the KJV and "
            "produces no meaningful text."
        ),
        training_data=(
            "The King James Version (public domain) from Debian's `bible-kjv` "
            f"package: {len(text):,} characters, one verse a line; "
            f"{tokens:,} training bytes seen (about "
            f"{tokens / (0.95 * len(text.encode())):.1f} passes over the first "
            "95%), the last 5% held out."
        ),
        training_command=" ".join(
            ["python", "examples/generate_kjv.py", *sys.argv[1:]]
        ),
        overwrite=True,
        usage='model.generate("And the LORD said unto Moses", max_new_tokens=32)',
        weights_dtype=storage,
    )
    print(f"Saved the preset to {args.save} ({storage} weights)")
    return results


if __name__ == "__main__":
    sys.exit(0 if main() else 1)

"""Train a GPT on the whole King James Bible and sample from it.

Data: the 31,102 verses of Debian's `bible-kjv` package (one verse a line,
about 4.1 MB), read through its `bible` command. The last 5% of the text (in
order: Hebrews to Revelation, cut at a verse) is held out for validation.
Tokens are byte-level BPE (GPT-2's scheme, learned on the training text
only, attached to the model): lossless, so the held-out loss converts
exactly into nats per byte, the unit of the `bzip2` and `xz` baselines
printed beside it, which code the same held-out bytes given the training
text. A token covers about 3.9 bytes, so a window of 256 tokens reads about
a thousand bytes, and an hour of this CPU sees the text many times over.

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

# TensorFlow and keras_tfm are imported in `main`, after the arguments are
# parsed: `--help` and a bad flag answer at once, without TensorFlow's logs.

# --- Configuration ------------------------------------------------------------
FULL = dict(
    characters=None,  # the whole text
    vocabulary_size=4096,  # byte-level BPE: about 3.9 bytes a token here
    sequence_length=256,  # tokens per training window (about 1,000 bytes)
    model=dict(
        num_layers=6,
        num_heads=6,
        hidden_dim=384,
        intermediate_dim=1536,
        position_encoding="rotary",
        dropout=0.1,  # many passes over 1M training tokens
    ),
    batch_size=32,
    epochs=12,
    steps_per_epoch=100,
    learning_rate=1e-3,
    device_defaults=True,  # the dtype policy and XLA setting fastest here
)
QUICK = dict(
    FULL,
    characters=100_000,
    vocabulary_size=512,
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


def held_out_bytes(tokenizer, windows):
    """The UTF-8 bytes of the windows' labels: what the held-out loss scores."""
    return tokenizer.detokenize(windows[:, 1:].reshape(1, -1))[0].encode()


def learning_curve(history, train_bytes_per_token, bytes_per_token):
    """Train and validation loss per epoch in nats per byte, as a table.

    The training loss (dropout on, averaged over the epoch) is converted at
    the training text's bytes per token, the validation loss at the held-out
    text's.
    """
    lines = [f"{'epoch':>5} {'train nats/byte':>16} {'val nats/byte':>14}"]
    pairs = zip(history["loss"], history["val_loss"], strict=True)
    for epoch, (train, val) in enumerate(pairs):
        train, val = train / train_bytes_per_token, val / bytes_per_token
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


def parse_args(argv=None):
    """The command-line arguments (parsed before TensorFlow is imported)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a small slice, < 1 min")
    parser.add_argument("--epochs", type=int, help="override the configured epochs")
    parser.add_argument(
        "--max-minutes",
        type=float,
        help="stop training after the first epoch that ends past this budget",
    )
    parser.add_argument("--save", help="write the model as a preset folder")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras
    import numpy as np

    from keras_tfm import baselines, training
    from keras_tfm.data import (
        next_token_windows,
        split_at_line,
        train_byte_pair_tokenizer,
    )
    from keras_tfm.datasets.bible import load_bible
    from keras_tfm.models import CausalLM, DecoderBackbone
    from keras_tfm.training import language_model_recipe, language_model_training

    config = dict(QUICK if args.quick else FULL)
    if args.epochs:
        config["epochs"] = args.epochs
    keras.utils.set_random_seed(SEED)
    began = time.time()
    # The settings of `keras-tfm train`: the device's fastest, or float32.
    fastest = config["device_defaults"]
    policy, jit_compile, _ = language_model_recipe.use_device_settings(
        "auto" if fastest else "float32", None if fastest else False
    )
    print(f"Device settings: {policy}, jit_compile={jit_compile}")

    text = load_bible()[: config["characters"]]
    train_text, held_out_text = split_at_line(text, VALIDATION_FRACTION)
    tokenizer = train_byte_pair_tokenizer(
        train_text.splitlines(keepends=True),
        config["vocabulary_size"],
        name="tokenizer",
    )
    train_ids = np.asarray(tokenizer(train_text), "int32")
    sequence_length = config["sequence_length"]
    train_windows = next_token_windows(train_ids, sequence_length)
    # Overlapping by one token: every held-out token but the first is scored.
    held_out = next_token_windows(
        tokenizer(held_out_text), sequence_length, overlap=True
    )
    validation = language_model_training.next_token_pairs(held_out).batch(
        config["batch_size"]
    )
    scored = held_out_bytes(tokenizer, held_out)
    train_bytes_per_token = len(train_text.encode()) / len(train_ids)
    bytes_per_token = len(scored) / held_out[:, 1:].size
    print(
        f"KJV: {len(text):,} characters, {len(text.splitlines()):,} verses; "
        f"BPE vocabulary {tokenizer.vocabulary_size():,}, {len(train_ids):,} "
        f"training tokens ({train_bytes_per_token:.2f} bytes each), "
        f"{held_out[:, 1:].size:,} held-out tokens scored ({len(scored):,} bytes)"
    )
    backbone = DecoderBackbone(
        vocabulary_size=tokenizer.vocabulary_size(),
        max_sequence_length=sequence_length,
        **config["model"],
    )
    model = CausalLM(backbone, CausalLM.preprocessor_for(tokenizer, backbone))
    print(f"CausalLM: {model.count_params():,} parameters")
    tick = time.time()
    # The recipe of `keras-tfm train`: AdamW, warm-up then cosine decay.
    history = training.train_language_model(
        model,
        language_model_training.next_token_pairs(train_windows),
        validation,  # each epoch: the learning curve
        epochs=config["epochs"],
        batch_size=config["batch_size"],
        learning_rate=config["learning_rate"],
        steps_per_epoch=config["steps_per_epoch"],
        warmup_steps=100 if not args.quick else 2,
        final_learning_rate_fraction=0.0,
        weight_decay=0.1,
        ignore_class=0,  # as trained for the shipped preset
        jit_compile=jit_compile,
        seed=SEED,
        callbacks=[training.TimeBudget(args.max_minutes)],
    )
    print(f"Training: {time.time() - tick:.0f} s")
    curve = learning_curve(history.history, train_bytes_per_token, bytes_per_token)
    print(curve)
    loss, accuracy = model.evaluate(validation, verbose=0)
    results = {
        "val_loss_per_token": round(loss, 4),
        "bytes_per_token": round(bytes_per_token, 4),
        "val_loss_per_byte": round(loss / bytes_per_token, 4),
        "val_perplexity_per_byte": round(math.exp(loss / bytes_per_token), 3),
        "val_bits_per_byte": round(loss / bytes_per_token / math.log(2), 3),
        "val_token_accuracy": round(accuracy, 4),
    }
    print("validation:", results)
    # The same held-out bytes, coded by a compressor that has read the
    # training text (and the first held-out token, which the model is given):
    # the floor a language model has to clear.
    given = train_text.encode() + tokenizer.detokenize(held_out[:1, :1])[0].encode()
    for compressor in ("bzip2", "xz"):
        results[f"{compressor}_nats_per_byte"] = round(
            baselines.compression_nats_per_byte(given, scored, compressor), 4
        )
    print(baseline_table(results))

    samples = model.generate(
        PROMPTS, max_new_tokens=48, sampler="top_k", top_k=10, seed=SEED
    )
    for sample in samples:
        print(f"\n> {sample}")
    greedy = model.generate(PROMPTS[0], max_new_tokens=16)
    print(f"\ngreedy> {greedy}")

    if args.save:
        config["epochs"] = len(history.history["loss"])  # as run (time budget)
        results = save(model, config, args, text, results, samples, curve, validation)
    print(f"\nTotal wall time: {time.time() - began:.0f} s")
    return results


def save(model, config, args, text, results, samples, curve, validation):
    from keras_tfm import training
    from keras_tfm.data import split_at_line
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
    rounded = model.evaluate(validation, verbose=0)
    rounded /= results["bytes_per_token"]
    print(f"validation nats/byte with float16-rounded weights: {rounded:.4f}")
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
    train_tokens = len(model.tokenizer(split_at_line(text, VALIDATION_FRACTION)[0]))
    save_preset(
        model,
        args.save,
        description=(
            f"A GPT ({config['model']['num_layers']} layers, d="
            f"{config['model']['hidden_dim']}, context "
            f"{config['sequence_length']} tokens, about "
            f"{config['sequence_length'] * results['bytes_per_token']:,.0f} bytes) "
            "trained on the King James Bible, with its byte-level BPE tokenizer "
            f"({model.tokenizer.vocabulary_size():,} tokens, learned on the "
            "training text; a keras-hub `BytePairTokenizer`) attached: "
            "`model.generate('In the beginning', max_new_tokens=64, "
            "sampler='top_k', top_k=10)` returns text. The tokenizer is "
            "lossless, so the held-out loss per token converts exactly into "
            "nats per byte, the unit of the compressors beside it.\n\n"
            "| validation (last 5% of the text) | value |\n|---|---|\n"
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
            f"{tokens:,} training tokens seen (about "
            f"{tokens / train_tokens:.1f} passes over the first 95%), the last "
            "5% held out (cut at a verse)."
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

"""`keras-tfm train`: a decoder-only preset trained on a text file
(`keras_tfm.training.train_on_text`)."""

import argparse

from keras_tfm.cli.arguments import (
    SHIPPED_TEXT_NAME,
    positive_float,
    positive_int,
    read_corpus,
)

HELP = "train a decoder-only preset on a text file"


def _vocabulary_size(text):
    value = positive_int(text)
    if value < 256:
        raise argparse.ArgumentTypeError(
            f"must be 256 (bytes) or more (byte-level BPE), got {text}"
        )
    return value


def _save_freq(text):
    if text == "epoch":
        return text
    try:
        return positive_int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be 'epoch' or a positive number of steps, got {text}"
        ) from None


def add_arguments(p):
    p.add_argument("--data", help="a UTF-8 text file (default: the shipped KJV text)")
    p.add_argument("--preset", default="gpt_micro")
    p.add_argument(
        "--vocabulary-size",
        type=_vocabulary_size,
        default=2048,
        help="tokens of the byte-level BPE learned on the training text "
        "(default 2048); 256: one token a byte",
    )
    p.add_argument("--epochs", type=positive_int, default=3)  # ~500 steps each (KJV)
    p.add_argument("--batch-size", type=positive_int, default=16)
    p.add_argument("--sequence-length", type=positive_int, default=128)
    p.add_argument("--learning-rate", type=positive_float, default=3e-3)
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument(
        "--dtype-policy",
        default="auto",
        help="float32, mixed_bfloat16 or mixed_float16; auto (default): the "
        "fastest measured for this device (keras_tfm.training.device_defaults)",
    )
    p.add_argument(
        "--jit",
        dest="jit_compile",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="compile with XLA (default: as device_defaults says)",
    )
    p.add_argument(
        "--output",
        help="the .keras file to write (default: <preset>_<text>.keras, "
        f"e.g. gpt_micro_{SHIPPED_TEXT_NAME}.keras)",
    )
    p.add_argument(
        "--peak-flops",
        type=positive_float,
        help="the peak FLOP/s (all devices together) that MFU is relative to, "
        "e.g. 312e12 for an A100 in bfloat16; default: measured before training",
    )
    p.add_argument("--prompt", action="append", help="prompts for the samples")
    p.add_argument("--max-new-tokens", type=positive_int, default=120)
    p.add_argument(
        "--samples",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="print samples from the trained model (default: on)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--strategy",
        default="auto",
        choices=["auto", "default", "mirrored", "multi_worker", "tpu"],
        help="tf.distribute strategy; auto: multi_worker when TF_CONFIG names "
        "several tasks, mirrored on several GPUs, else one device",
    )
    p.add_argument("--tpu", help="the TPU's name or address (with --strategy tpu)")
    p.add_argument(
        "--checkpoint-dir",
        help="backups (to resume after a crash) and best.keras "
        "(default: <output>.checkpoints)",
    )
    p.add_argument(
        "--save-freq",
        type=_save_freq,
        default="epoch",
        help="back up every N steps, or 'epoch' (default)",
    )


def run(args):
    from keras_tfm import distribute

    # First: a multi-worker strategy must exist before any TensorFlow work.
    strategy = distribute.strategy_from_flags(args.strategy, tpu=args.tpu)

    from keras_tfm import training, zoo
    from keras_tfm.training.language_model_recipe import text_tokenizer

    def build_model(train_text):
        tokenizer = text_tokenizer(train_text, args.vocabulary_size)
        return zoo.from_preset(
            args.preset, vocabulary_size=tokenizer.vocabulary_size(),
            dropout=args.dropout, max_sequence_length=args.sequence_length,
            tokenizer=tokenizer,
        )  # fmt: skip

    text, source, stem = read_corpus(args.data)
    training.train_on_text(
        build_model, text, name=args.preset, source=source, strategy=strategy,
        output=args.output or f"{args.preset}_{stem}.keras",
        epochs=args.epochs, batch_size=args.batch_size,
        sequence_length=args.sequence_length, learning_rate=args.learning_rate,
        dtype_policy=args.dtype_policy, jit_compile=args.jit_compile,
        peak_flops=args.peak_flops, checkpoint_dir=args.checkpoint_dir,
        save_freq=args.save_freq, seed=args.seed,
        prompts=(args.prompt or None) if args.samples else [],
        max_new_tokens=args.max_new_tokens,
    )  # fmt: skip

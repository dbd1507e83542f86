"""`keras-tfm evaluate MODEL`: a causal LM's loss and perplexity on the
validation split of a text, per token and per byte (what `keras-tfm train`
prints), beside `bzip2 -9` coding the same bytes."""

import math

from keras_tfm.cli import loading
from keras_tfm.cli.arguments import MODEL_HELP, positive_int, read_corpus

HELP = "validation loss per token and per byte, beside bzip2 -9"


def add_arguments(p):
    p.add_argument("model", help=MODEL_HELP)
    p.add_argument("--data", help="a UTF-8 text file (default: the shipped KJV text)")
    p.add_argument(
        "--sequence-length", type=positive_int,
        help="tokens per window, at most the model's (default: the model's)",
    )  # fmt: skip
    p.add_argument("--batch-size", type=positive_int, default=32)
    p.add_argument("--seed", type=int, default=0)


def run(args):
    from keras_tfm import training
    from keras_tfm.training.language_model_recipe import (
        held_out_batches,
        held_out_comparison,
    )

    model = loading.language_model(args.model, needs="evaluate")
    text, source, _ = read_corpus(args.data)
    length = args.sequence_length or model.max_sequence_length
    if length > model.max_sequence_length:
        raise SystemExit(
            f"keras-tfm: --sequence-length {length} exceeds the model's "
            f"{model.max_sequence_length} positions; pass at most "
            f"{model.max_sequence_length}."
        )
    validation = held_out_batches(model, text, length, args.batch_size, args.seed)
    model.compile(loss=training.TokenCrossEntropy(ignore_class=None))
    loss = model.evaluate(validation, return_dict=True, verbose=0)["loss"]
    bytes_per_token, bzip2 = held_out_comparison(model, text, length)
    print(
        f"{source}, validation split: loss {loss:.4f} nats/token, perplexity "
        f"{math.exp(loss):.3f}; {loss / bytes_per_token:.4f} nats/byte "
        f"({bytes_per_token:.2f} bytes a token), bzip2 -9 given the training "
        f"text {bzip2:.4f}"
    )

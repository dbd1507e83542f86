"""The model a command names, checked for what the command needs, and its
weights stored as `--weights` asks."""

from pathlib import Path

# What each command takes, for the error of `language_model`.
WANTED = {
    "generate": "a keras-tfm model with `generate` and a tokenizer",
    "evaluate": "a keras-tfm CausalLM with a tokenizer",
    "chat": "a keras-tfm CausalLM with a tokenizer and chat template",
    "classify": "a keras-tfm classifier with a tokenizer",
}

# Encoder-decoder classes (a Seq2SeqLM is also a CausalLM): not for `evaluate`.
SEQ2SEQ_CLASSES = ("Seq2SeqLM", "Seq2SeqTransformer")

WEIGHTS = ("float32", "int8", "bfloat16", "int8_blocks")
"""`--weights`: how the weight matrices are stored."""


def resolve_model(reference, weights=None):
    """The model a command names: a `.keras` file if `reference` is a path
    that exists, else a preset of the zoo (`keras_tfm.zoo.named_model`);
    neither: a one-line error. A GGUF preset loads `weights="int8_blocks"`
    as the file's blocks."""
    from keras_tfm.zoo import list_presets
    from keras_tfm.zoo.named_model import load_named_model

    try:
        return load_named_model(reference, weights)
    except ValueError as error:
        if reference in list_presets() and not Path(reference).is_file():
            raise  # a preset's own error, with its traceback
        raise SystemExit(f"keras-tfm: {error}") from None


def language_model(reference, needs="generate", weights=None):
    """`resolve_model(reference, weights)`, checked to be a keras-tfm model
    with a tokenizer and the method `needs` (a one-line error otherwise)."""
    from keras_tfm import models

    model = resolve_model(reference, weights)
    usable = callable(getattr(model, needs, None)) and hasattr(model, "tokenizer")
    if needs == "evaluate":  # as a decoder-only language model
        seq2seq = [getattr(models, name, None) for name in SEQ2SEQ_CLASSES]
        usable = isinstance(model, models.CausalLM) and not isinstance(
            model, tuple(cls for cls in seq2seq if cls is not None)
        )
    if not usable:
        kind = f"{type(model).__module__.split('.')[0]} {type(model).__name__}"
        raise SystemExit(
            f"keras-tfm: {reference} is a {kind}; `keras-tfm {needs}` takes "
            f"{WANTED[needs]} (`keras-tfm presets` shows the command that fits "
            "each preset)."
        )
    if model.tokenizer is None:
        raise SystemExit(f"keras-tfm: {reference} has no tokenizer attached.")
    return model


def store_weights(model, weights):
    """Weight-only int8 or bfloat16 matrices: fewer bytes read per decoded
    token, what makes decoding faster on a CPU (docs/deployment.md)."""
    from keras_tfm.models import int8_weight_only_config

    if weights != "float32" and not callable(getattr(model, "cast_weights", None)):
        raise SystemExit(
            f"keras-tfm: --weights {weights}: a {type(model).__name__} keeps its "
            "weights in float32; use --weights float32."
        )
    try:
        if weights == "int8":
            model.quantize("int8", config=int8_weight_only_config())
        elif weights == "bfloat16":
            model.cast_weights("bfloat16")
        elif weights == "int8_blocks" and model.quantized_to != weights:
            model.cast_weights(weights)
    except ValueError as error:
        raise SystemExit(f"keras-tfm: --weights {weights}: {error}") from None
    return model


WEIGHTS_HELP = (
    "store the weight matrices as weight-only int8 or bfloat16: faster "
    "decoding on a CPU, logits within a few percent; int8_blocks: a GGUF "
    "file's Q4/Q8 blocks as they are (its float32 logits, a quarter of the "
    "memory)"
)


def add_weights_option(parser, default="float32", help=WEIGHTS_HELP):
    parser.add_argument("--weights", default=default, choices=WEIGHTS, help=help)

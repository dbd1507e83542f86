"""`keras-tfm export MODEL DIRECTORY`: what the command line runs."""

from pathlib import Path

from keras_tfm.export.litert import export_litert
from keras_tfm.export.saved_model import export_saved_model, signatures_of


def saved_model_options(args):
    """`export_saved_model`'s keyword arguments from the command's `args`.

    Raises:
        ValueError: a `--max-new-tokens` or `--num-beams` below 1.

    Example:
    >>> from keras_tfm import cli
    >>> args = cli.build_parser().parse_args(
    ...     ["export", "translator_de_en", "out", "--num-beams", "4",
    ...      "--length-penalty", "1.5", "--max-new-tokens", "48"])
    >>> saved_model_options(args)
    {'overwrite': False, 'max_new_tokens': 48, 'num_beams': 4, 'length_penalty': 1.5}
    """
    for name in ("max_new_tokens", "num_beams"):
        if getattr(args, name) < 1:
            flag = "--" + name.replace("_", "-")
            raise ValueError(
                f"{flag} must be at least 1. Received: {flag} {getattr(args, name)}"
            )
    return {
        "overwrite": args.overwrite,
        "max_new_tokens": args.max_new_tokens,
        "num_beams": args.num_beams,
        "length_penalty": args.length_penalty,
    }


def run_export(model, args):
    """Writes `model` as args ask and prints what was written.

    `args`: `directory`, `overwrite`, `max_new_tokens`, `num_beams`,
    `length_penalty` (`translate`'s defaults), `litert`, `weights` (already
    applied to `model` for a SavedModel; for LiteRT "int8" is the file's own
    quantization), and for a causal LM's LiteRT step `template`, its step
    template or None.
    """
    directory = Path(args.directory)
    if args.litert and getattr(model, "is_decoder_only", False):
        return _export_decoder_step(model, args, directory / "decoder.tflite")
    if args.litert:
        path = directory / "model.tflite"
        if path.exists() and not args.overwrite:
            raise ValueError(
                f"{path} exists; pass --overwrite to replace it. Received: "
                f"directory={str(directory)!r}"
            )
        quantization = "int8" if args.weights == "int8" else "float32"
        size = export_litert(model, path, quantization=quantization)
        print(f"wrote {path} ({size / 1e6:.1f} MB, {quantization})")
        return
    size = export_saved_model(model, directory, **saved_model_options(args))
    names = ", ".join(signatures_of(model, args.max_new_tokens))
    print(f"wrote {directory} ({size / 1e6:.1f} MB; signatures: {names})")


def _export_decoder_step(model, args, path):
    """Writes a decoder-only causal LM's decoding step with the chat entry's
    buffer (`keras_tfm.lite.chat_entries.buffer_length`), from
    `args.template` (the preset's step template, or None) where given."""
    from keras_tfm.export.litert_decoder import export_litert_decoder
    from keras_tfm.lite.chat_entries import buffer_length

    if args.weights not in ("int8", "float32"):
        raise ValueError(
            "A LiteRT decoding step takes --weights float32 or int8. "
            f"Received: --weights {args.weights}"
        )
    if path.exists() and not args.overwrite:
        raise ValueError(
            f"{path} exists; pass --overwrite to replace it. Received: "
            f"directory={str(path.parent)!r}"
        )
    quantization = args.weights
    positions = buffer_length(model)
    template = getattr(args, "template", None)
    size = export_litert_decoder(
        model, path, positions, quantization, template=template
    )
    print(
        f"wrote {path} ({size / 1e6:.1f} MB, {quantization}; signatures: "
        f"prefill, decode; {positions} positions)"
    )

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
    `length_penalty` (`translate`'s defaults), `litert`, `weights`
    (already applied to `model` for a SavedModel; for LiteRT "int8" is the
    converter's weight quantization).
    """
    directory = Path(args.directory)
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

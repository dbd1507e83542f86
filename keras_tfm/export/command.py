"""`keras-tfm export MODEL DIRECTORY`: what the command line runs."""

from pathlib import Path

from keras_tfm.export.litert import export_litert
from keras_tfm.export.saved_model import export_saved_model, signatures_of


def run_export(model, args):
    """Writes `model` as args ask and prints what was written.

    `args`: `directory`, `overwrite`, `max_new_tokens`, `litert`, `weights`
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
    size = export_saved_model(
        model, directory, overwrite=args.overwrite, max_new_tokens=args.max_new_tokens
    )
    names = ", ".join(signatures_of(model, args.max_new_tokens))
    print(f"wrote {directory} ({size / 1e6:.1f} MB; signatures: {names})")

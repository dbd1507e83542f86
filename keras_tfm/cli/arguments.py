"""Argument types and inputs the commands share: positive numbers, the
training text, the model argument's help."""

import argparse
import math
from pathlib import Path

# `train` writes <preset>_<text>.keras: gpt_micro_kjv.keras by default, named
# for what it is (not kjv_gpt.keras: the zoo's kjv_gpt is another model).
SHIPPED_TEXT_NAME = "kjv"

MODEL_HELP = "a .keras file, or a preset name (`keras-tfm presets`)"


def positive_int(text):
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def positive_float(text):
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text}")
    return value


def read_corpus(path):
    """(text, where it comes from, a short name for the output file)."""
    from keras_tfm.datasets import load_default_corpus

    if path is None:
        shipped = "the shipped King James Bible"
        return load_default_corpus(), shipped, SHIPPED_TEXT_NAME
    path = Path(path)
    if not path.is_file():
        raise SystemExit(f"keras-tfm: no such file: {path}")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise SystemExit(
            f"keras-tfm: {path} is not UTF-8 text ({error.reason} at byte "
            f"{error.start}); convert it with e.g. `iconv -t utf-8`."
        ) from None
    if not text.strip():
        raise SystemExit(f"keras-tfm: {path} is empty.")
    return text, str(path), path.stem

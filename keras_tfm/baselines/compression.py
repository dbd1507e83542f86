"""A general-purpose compressor as a language-model baseline.

A compressor is a sequential model of bytes: the bytes it spends on held-out
text after it has seen the training text measure how predictable that text is,
in the same unit as a byte-level model's cross-entropy.
"""

import bz2
import lzma
import math

from keras_tfm.validation import check_choice

COMPRESSORS = {
    # `bzip2 -9`: 900 kB blocks, so only the last block of training text helps.
    "bzip2": lambda data: bz2.compress(data, compresslevel=9),
    # `xz -9e`: a 64 MiB dictionary, so all of a few-MB training text helps.
    "xz": lambda data: lzma.compress(data, preset=9 | lzma.PRESET_EXTREME),
}


def compression_nats_per_byte(train, validation, compressor="bzip2"):
    """Nats per byte a compressor spends on `validation` given `train`.

        (len(c(train + validation)) - len(c(train))) * 8 * ln 2 / len(validation)

    the conditional code length of the held-out bytes, comparable with a
    byte-level language model's validation loss (nats per byte). Multiply by
    1 / ln 2 for bits per byte.

    Args:
        train: the text the "model" may have seen (str, UTF-8 encoded, or bytes).
        validation: the held-out text (str or bytes, not empty).
        compressor: "bzip2" (`bzip2 -9`) or "xz" (`xz -9e`).

    Returns:
        A float, nats per byte of `validation`.

    Example:
    >>> text = b"In the beginning God created the heaven and the earth. " * 50
    >>> compression_nats_per_byte(text, text[:1000]) < 0.1  # seen before: cheap
    True
    """
    check_choice("compressor", compressor, tuple(COMPRESSORS))
    train, validation = _as_bytes("train", train), _as_bytes("validation", validation)
    if not validation:
        raise ValueError("`validation` must not be empty. Received: validation=b''")
    compress = COMPRESSORS[compressor]
    extra_bytes = len(compress(train + validation)) - len(compress(train))
    return extra_bytes * 8 * math.log(2) / len(validation)


def _as_bytes(name, text):
    if isinstance(text, str):
        return text.encode("utf-8")
    if isinstance(text, (bytes, bytearray)):
        return bytes(text)
    raise ValueError(
        f"`{name}` must be str or bytes. Received: {name} of type {type(text).__name__}"
    )


def held_out_nats_per_byte(
    text, sequence_length, validation_fraction, compressor="bzip2"
):
    """`compression_nats_per_byte` on a byte-level language model's own split.

    Cuts the UTF-8 bytes of `text` exactly where
    `keras_tfm.data.language_model_datasets` (with a `ByteTokenizer`) puts its
    validation windows: the compressor sees the training windows' bytes and
    codes the validation windows' bytes, the bytes the model's validation loss
    is averaged over (the model does not predict the first byte of each
    window: one byte in `sequence_length + 1`).

    Args:
        text: the whole corpus (str).
        sequence_length: the model's training window, in bytes.
        validation_fraction: as given to `language_model_datasets`.
        compressor: "bzip2" or "xz".

    Returns:
        A float, nats per held-out byte.

    Example:
    >>> text = "In the beginning God created the heaven and the earth. " * 50
    >>> held_out_nats_per_byte(text, 64, 0.1) < 0.1  # repeated text: cheap
    True
    """
    from keras_tfm.data.language_modeling import split_offsets

    data = _as_bytes("text", text)
    train_end, end = split_offsets(len(data), sequence_length, validation_fraction)
    return compression_nats_per_byte(data[:train_end], data[train_end:end], compressor)

"""Reading GGUF files (llama.cpp's format) with ggml-org's `gguf` package.

`gguf.GGUFReader` parses the header, the metadata and the tensor table and
maps the tensor data; `gguf.quants.dequantize` turns quantised blocks into
float32. This module adds the checks whose failures the reader reports only
as NumPy reshape errors (a file that is not GGUF, a truncated file, an
unsupported quantisation type, a missing key or tensor, a wrong shape).
"""

import functools
import os

import numpy as np

GGUF_MAGIC = b"GGUF"
# The tensor types this converter dequantises: plain floats and the ggml
# block quantisations `gguf.quants` implements in NumPy and llama.cpp's
# converters write for Llama models. (The IQ*/TQ*/FP4 types are refused:
# gguf's NumPy versions of them are slow and untested here.)
SUPPORTED_TYPES = (
    "F32",
    "F16",
    "BF16",
    "Q4_0",
    "Q4_1",
    "Q5_0",
    "Q5_1",
    "Q8_0",
    "Q2_K",
    "Q3_K",
    "Q4_K",
    "Q5_K",
    "Q6_K",
)


def import_gguf():
    """The `gguf` package, or a ValueError naming the install command."""
    try:
        import gguf
        import gguf.quants  # noqa: F401
    except ImportError as error:
        raise ValueError(
            "Reading GGUF files needs the `gguf` package (ggml-org's NumPy "
            f"reader): `pip install gguf`. Import failed with: {error}"
        ) from None
    return gguf


def open_gguf(path):
    """Opens a GGUF file; returns a `gguf.GGUFReader`.

    The reader is kept per file version (path, modification time, size):
    parsing SmolLM2's metadata (98k vocabulary strings and merges) takes
    seconds, and a second `open_gguf` of the same file returns the same
    reader. Treat it as read-only (the tensors are a read-only memory map).

    Raises:
        ValueError: the path is not a file, the file is not GGUF (no "GGUF"
            magic), or it is truncated or corrupt.
    """
    gguf = import_gguf()
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise ValueError(f"`path` must be an existing file. Received: path={path!r}")
    with open(path, "rb") as file:
        magic = file.read(4)
    if magic != GGUF_MAGIC:
        raise ValueError(
            f"Not a GGUF file: it starts with {magic!r}, not {GGUF_MAGIC!r}. "
            f"Received: path={path!r}"
        )
    status = os.stat(path)
    return _read(gguf, path, status.st_mtime_ns, status.st_size)


@functools.lru_cache(maxsize=4)
def _read(gguf, path, modified, size):
    try:
        reader = gguf.GGUFReader(path)
    except (ValueError, IndexError, OverflowError) as error:
        # The reader maps the file; a cut-off header or tensor table shows up
        # as a failed reshape of the mapped bytes.
        raise ValueError(
            f"The GGUF file is truncated or corrupt ({size} bytes; reading it "
            f"failed with: {error}). Received: path={path!r}"
        ) from None
    for tensor in reader.tensors:
        end = tensor.data_offset + tensor.n_bytes
        if end > size:
            raise ValueError(
                f"The GGUF file is truncated: tensor {tensor.name!r} ends at "
                f"byte {end} but the file has {size} bytes. Received: path={path!r}"
            )
    return reader


def metadata(reader, key, default=None, required=True):
    """The value of metadata `key` (a str, number, bool or list)."""
    field = reader.fields.get(key)
    if field is None:
        if required:
            raise ValueError(
                f"The GGUF file has no metadata key {key!r}. Received: "
                f"path={reader.data.filename!r}"
            )
        return default
    return field.contents()


def tensor_table(reader):
    """Tensor name -> `gguf.ReaderTensor`."""
    return {tensor.name: tensor for tensor in reader.tensors}


def dequantize(tensor, shape):
    """A tensor's values as float32, checked against `shape`.

    Args:
        tensor: a `gguf.ReaderTensor`.
        shape: the expected NumPy shape: ggml lists dimensions innermost
            first, so a matrix of `out` rows of `in` values is `(out, in)`
            here (PyTorch's `nn.Linear` layout).

    Returns:
        A float32 array of `shape`.
    """
    check_tensor(tensor, shape)
    gguf = import_gguf()
    values = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
    return np.asarray(values, "float32").reshape(shape)


def check_tensor(tensor, shape):
    """Refuses a tensor of an unsupported type or not of `shape` (as `dequantize`)."""
    kind = tensor.tensor_type.name
    if kind not in SUPPORTED_TYPES:
        raise ValueError(
            f"Tensor {tensor.name!r} is quantised as {kind}, which is not "
            f"supported. Supported types: {', '.join(SUPPORTED_TYPES)}"
        )
    found = tuple(int(d) for d in reversed(tensor.shape))
    if found != tuple(shape):
        raise ValueError(
            f"Tensor {tensor.name!r} has shape {found}, but the model's "
            f"metadata needs {tuple(shape)}"
        )

"""A GGUF tensor's quantised blocks as int8 values with a scale and offset.

ggml's simple block types hold 32 weights per block: Q8_0 as 34 bytes
(float16 `d`, 32 int8 `q`: w = d * q), Q4_0 as 18 bytes (`d`, 16 bytes of
4-bit `q`, 0..15: w = d * (q - 8)), Q4_1 as 20 bytes (`d`, float16 `m`, 16
bytes of `q`: w = d * q + m). In the 16 bytes, byte j holds weight j in its
low nibble and weight j + 16 in its high one. `int8_blocks` unpacks them as
int8 values (out, in) with one float16 scale and offset per block (out,
in / 32), which `keras_tfm.kernels.dequantize_blocks` turns back into exactly
the weights ggml's (and gguf's NumPy) dequantisation gives. Other types are
None here (the caller dequantises them).
"""

import numpy as np

BLOCK_BYTES = {"Q8_0": 34, "Q4_0": 18, "Q4_1": 20}


def _nibbles(packed):
    # (..., 16) bytes -> (..., 32) values: low nibbles first, then high ones.
    return np.concatenate([packed & 0x0F, packed >> 4], axis=-1)


def int8_blocks(tensor, shape):
    """`(values int8, scale float16, offset float16)` of a Q8_0/Q4_0/Q4_1
    tensor of `shape` (out, in), or None for another type.

    Example:
    >>> import gguf, gguf.quants
    >>> w = np.linspace(-1, 1, 64, dtype="float32").reshape(2, 32)
    >>> class Tensor:  # what gguf.GGUFReader gives: raw bytes and the type
    ...     tensor_type = gguf.GGMLQuantizationType.Q4_1
    ...     data = gguf.quants.quantize(w, tensor_type)
    >>> values, scale, offset = int8_blocks(Tensor, (2, 32))
    >>> ours = values * scale.astype("float32") + offset.astype("float32")
    >>> reference = gguf.quants.dequantize(Tensor.data, Tensor.tensor_type)
    >>> bool(np.array_equal(ours, reference))
    True
    """
    kind = tensor.tensor_type.name
    if kind not in BLOCK_BYTES:
        return None
    out, width = shape
    raw = np.asarray(tensor.data, "uint8").reshape(out, width // 32, BLOCK_BYTES[kind])
    scale = raw[..., 0:2].copy().view("float16")[..., 0]
    offset = np.zeros_like(scale)
    if kind == "Q8_0":
        values = raw[..., 2:].copy().view("int8")
    elif kind == "Q4_0":
        values = _nibbles(raw[..., 2:]).astype("int8") - 8
    else:  # Q4_1
        offset = raw[..., 2:4].copy().view("float16")[..., 0]
        values = _nibbles(raw[..., 4:]).astype("int8")
    return values.reshape(out, width), scale, offset

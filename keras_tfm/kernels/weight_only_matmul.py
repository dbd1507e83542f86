"""The product of float activations with int8 or bfloat16 weights held output-major,
and with int8 values in blocks that carry their own scale and offset."""

import math

from keras import ops


def weight_only_matmul(inputs, kernel, scale=None):
    """`inputs @ (kernel / scale[:, None]).T` with `kernel` (out, in), low-precision.

    Output-major low-precision weights are what makes a one-row product
    (batch-1 decoding) read 1 (int8) or 2 (bfloat16) bytes a weight at memory
    speed under XLA on a CPU: each output is a dot over one contiguous row,
    which XLA fuses with the conversion to the inputs' dtype. With an
    input-major (in, out) kernel, Keras's layout, XLA's fused loop strides
    across rows and runs 4-5x slower than a float32 dot
    (`benchmarks/int8_matvec.py`). Several rows (prefill, batched decoding)
    take a matmul of the converted kernel instead.

    Args:
        inputs: float activations (..., in).
        kernel: int8 or bfloat16 weights (out, in).
        scale: float (out,), `kernel / scale[:, None]` being the weights;
            None for weights stored as they are (bfloat16).

    Returns:
        (..., out) in the dtype of `inputs`.

    Example:
    >>> from keras import ops
    >>> kernel = np.array([[127, 0], [-127, 64]], "int8")
    >>> scale = np.array([127.0, 64.0], "float32")
    >>> y = weight_only_matmul(np.array([[2.0, 3.0]], "float32"), kernel, scale)
    >>> ops.convert_to_numpy(y).tolist()  # [2 * 1, (2 * -127 + 3 * 64) / 64]
    [[2.0, -0.96875]]
    """
    dtype = inputs.dtype
    rows = math.prod(inputs.shape[:-1]) if None not in inputs.shape[:-1] else None
    if rows != 1:
        # Transposed before the conversion, so that a decoding loop keeps the
        # float kernel input-major, the layout XLA's CPU matmul is fast with
        # (output-major it decoded SmolLM2 1.5x slower at batch 8).
        if kernel.dtype != "int8":
            # Transposed as integer bits: XLA folds a transpose of bfloat16
            # weights into the matmul, which then reads them output-major.
            kernel = ops.view(ops.transpose(ops.view(kernel, "int16")), kernel.dtype)
        else:
            kernel = ops.transpose(kernel)
        outputs = ops.matmul(inputs, ops.cast(kernel, dtype))
        return outputs if scale is None else ops.divide(outputs, ops.cast(scale, dtype))
    # XLA hoists a loop-invariant conversion of the weights out of the
    # decoding while-loop, which then reads float32 weights: 4 bytes a weight.
    # A zero that depends on the step's inputs (1 only where an input is NaN,
    # and the output is NaN there anyway) keeps the conversion in the product.
    # It is added to the integer bits: a bfloat16 add runs as float32 on a CPU,
    # after a (hoisted) conversion.
    zero = ops.cast(ops.any(ops.isnan(inputs)), "int8")
    if kernel.dtype == "int8":
        kernel = kernel + zero
    else:
        bits = ops.view(kernel, "int16") + ops.cast(zero, "int16")
        kernel = ops.view(bits, kernel.dtype)
    outputs = ops.einsum("...i,oi->...o", inputs, ops.cast(kernel, dtype))
    if scale is None:
        # Divided by 1 (2 with a NaN input): XLA would otherwise fuse a
        # following add (a bias, the residual) into the product, and then no
        # longer fuse the conversion of the weights into it.
        scale = ops.cast(zero, dtype) + 1
    return ops.divide(outputs, ops.cast(scale, dtype))


BLOCK_SIZE = 32
"""Weights per block of `block_matmul` (ggml's block size)."""


def dequantize_blocks(values, scale, offset, dtype="float32"):
    """The weights of int8 `values` (out, in) in blocks of `BLOCK_SIZE` along
    `in`: `values * scale + offset`, with one float `scale` and `offset` per
    block, (out, in / BLOCK_SIZE) each.

    Example:
    >>> from keras import ops
    >>> values = np.arange(32, dtype="int8")[None]
    >>> w = dequantize_blocks(values, np.array([[0.5]]), np.array([[-1.0]]))
    >>> ops.convert_to_numpy(w)[0, :3].tolist()
    [-1.0, -0.5, 0.0]
    """
    out, width = values.shape
    blocks = ops.reshape(
        ops.cast(values, dtype), (out, width // BLOCK_SIZE, BLOCK_SIZE)
    )
    weights = (
        blocks * ops.cast(scale, dtype)[..., None] + ops.cast(offset, dtype)[..., None]
    )
    return ops.reshape(weights, (out, width))


def block_matmul(inputs, values, scale, offset):
    """`inputs @ dequantize_blocks(values, scale, offset).T`, dequantised in XLA.

    The weights stay int8 (1 byte each, plus 4 bytes of scale and offset per
    32) and are converted inside the product. One row (batch-1 decoding):
    an elementwise product and a sum over each output's row, which XLA fuses
    into one loop reading the int8 values (a dot would not take the
    per-block scale inside); with a zero that depends on the inputs, as in
    `weight_only_matmul`, so that XLA does not hoist the conversion out of
    the decoding loop. Several rows: the dequantised weights' matmul.

    Args:
        inputs: float activations (..., in).
        values: int8 (out, in).
        scale, offset: (out, in / 32), float16 or float32.

    Returns:
        (..., out) in the dtype of `inputs`.

    Example:
    >>> from keras import ops
    >>> values = np.ones((2, 32), "int8")
    >>> scale = np.array([[1.0], [2.0]], "float16")
    >>> offset = np.array([[0.0], [-1.0]], "float16")
    >>> y = block_matmul(np.ones((1, 32), "float32"), values, scale, offset)
    >>> ops.convert_to_numpy(y).tolist()  # 32 * 1, 32 * (2 - 1)
    [[32.0, 32.0]]
    """
    dtype = inputs.dtype
    out, width = values.shape
    rows = math.prod(inputs.shape[:-1]) if None not in inputs.shape[:-1] else None
    if rows != 1:
        weights = dequantize_blocks(values, scale, offset, dtype)
        return ops.matmul(inputs, ops.transpose(weights))
    zero = ops.cast(ops.any(ops.isnan(inputs)), "int8")
    weights = dequantize_blocks(values + zero, scale, offset, dtype)
    lead = inputs.shape[:-1]
    x = ops.reshape(inputs, (1, 1, width))
    outputs = ops.sum(ops.reshape(weights, (1, out, width)) * x, axis=-1)
    return ops.reshape(outputs, (*lead, out))

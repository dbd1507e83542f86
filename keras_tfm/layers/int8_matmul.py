"""The product of float activations with an int8 weight matrix held output-major."""

import math

from keras import ops


def weight_only_int8_matmul(inputs, kernel, scale):
    """`inputs @ (kernel / scale[:, None]).T` with `kernel` int8 (out, in).

    Output-major int8 weights are what makes a one-row product (batch-1
    decoding) read int8 bytes at memory speed under XLA on a CPU: each output
    is a dot over one contiguous int8 row, which XLA fuses with the int8 ->
    float conversion. With an input-major (in, out) kernel, Keras's layout,
    XLA's fused loop strides across rows and runs 4x slower than a float32
    dot (`benchmarks/int8_matvec.py`). Several rows (prefill, batched
    decoding) take a float32 matmul of the converted kernel instead.

    Args:
        inputs: float activations (..., in).
        kernel: int8 weights (out, in).
        scale: float (out,): `kernel / scale[:, None]` are the float weights.

    Returns:
        (..., out) in the dtype of `inputs`.

    Example:
    >>> from keras import ops
    >>> kernel = np.array([[127, 0], [-127, 64]], "int8")
    >>> scale = np.array([127.0, 64.0], "float32")
    >>> y = weight_only_int8_matmul(np.array([[2.0, 3.0]], "float32"), kernel, scale)
    >>> ops.convert_to_numpy(y).tolist()  # [2 * 1, (2 * -127 + 3 * 64) / 64]
    [[2.0, -0.96875]]
    """
    dtype = inputs.dtype
    scale = ops.cast(scale, dtype)
    rows = math.prod(inputs.shape[:-1]) if None not in inputs.shape[:-1] else None
    if rows != 1:
        # Transposed before the conversion, so that a decoding loop keeps the
        # float kernel input-major, the layout XLA's CPU matmul is fast with
        # (output-major it decoded SmolLM2 1.5x slower at batch 8).
        outputs = ops.matmul(inputs, ops.cast(ops.transpose(kernel), dtype))
        return ops.divide(outputs, scale)
    # XLA hoists a loop-invariant int8 -> float conversion out of the decoding
    # while-loop, which then reads float32 weights: 4 bytes a weight, not 1.
    # A zero that depends on the step's inputs (1 only where an input is NaN,
    # and the output is NaN there anyway) keeps the conversion in the product.
    kernel = kernel + ops.cast(ops.any(ops.isnan(inputs)), "int8")
    outputs = ops.einsum("...i,oi->...o", inputs, ops.cast(kernel, dtype))
    return ops.divide(outputs, scale)

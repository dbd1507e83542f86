"""`rotated_down_projections()`: a traced step's down projections read a
Hadamard-rotated input.

Inside the scope, `keras_tfm.layers.FeedForward` computes its output
projection as `(x @ H) @ K`, where `H` is block-diagonal Hadamard
(`keras_tfm.lite.rotation.block_hadamard`, blocks of `rows_block(width)`)
and `K = H^T @ kernel` is given by the caller: the same function in float,
but an input whose few large channels are spread over their block, which
XNNPACK then quantizes per row with little loss (the int8 LiteRT step,
`keras_tfm.lite.quantized_step`). The LiteRT decoding step
(`keras_tfm.export.litert_decoder`) traces under it; nothing else does.

Example:
>>> import numpy as np
>>> import keras_tfm
>>> from keras_tfm.lite.rotation import block_hadamard_rows
>>> ffn = keras_tfm.layers.FeedForward(intermediate_dim=8)
>>> x = np.random.default_rng(0).normal(size=(1, 2, 4)).astype("float32")
>>> plain = ffn(x)
>>> kernel = block_hadamard_rows(ffn.output_dense.kernel.numpy(), 8)
>>> with rotated_down_projections({id(ffn.output_dense): (kernel, 8)}):
...     rotated = ffn(x)
>>> bool(np.allclose(plain, rotated, atol=1e-6))
True
"""

import keras
from keras import ops

from keras_tfm.kernels.trace_setting import TraceSetting
from keras_tfm.lite.rotation import block_hadamard

_kernels = TraceSetting()


def rotated_down_projections(kernels):
    """A scope in which the output projections in `kernels` (`{id(dense):
    (rotated kernel, block)}`) read their input rotated (see module)."""
    return _kernels.set(kernels)


def rotated_output(dense, hidden):
    """`dense(hidden)` through its rotated kernel inside the scope, else None."""
    found = (_kernels.get() or {}).get(id(dense))
    if found is None:
        return None
    kernel, block = found
    width = hidden.shape[-1]
    with keras.name_scope("input_rotation"):
        blocks = ops.reshape(hidden, (*ops.shape(hidden)[:-1], width // block, block))
        rotation = ops.convert_to_tensor(block_hadamard(block), hidden.dtype)
        hidden = ops.reshape(ops.matmul(blocks, rotation), ops.shape(hidden))
    with keras.name_scope("rotated_output"):
        outputs = ops.matmul(hidden, ops.cast(kernel, hidden.dtype))
        if dense.use_bias:
            outputs = outputs + ops.cast(dense.bias, hidden.dtype)
    return outputs

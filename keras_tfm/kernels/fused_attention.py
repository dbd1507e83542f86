"""Attention through `keras.ops.dot_product_attention`, which compilers fuse.

On JAX, `ops.dot_product_attention` is `jax.nn.dot_product_attention`:
cuDNN's fused (flash) attention on an NVIDIA GPU, whose (q_len, k_len)
weights never reach memory and whose softmax statistics are float32, and
XLA's reference implementation elsewhere (float32 logits and softmax). A
boolean mask keeps it off cuDNN (/work/shared/gpu/README.md: the float32
path, 0.6x the speed), so the masks it is given here are the ones it fuses:
the causal mask as `is_causal`, and a key padding mask as an additive bias
(`key_padding_bias`, as keras-hub's GPT-2 effectively passes its mask).

The contract is `plain_dot_product_attention`'s: a query whose keys are all
masked gets a zero output (a bias alone would spread its weight uniformly).
"""

import keras
from keras import ops

from keras_tfm.kernels.masks import MASKED_LOGIT

# float16's masked logit: 0.7 of its largest value (65504), as Keras masks.
FLOAT16_MASKED_LOGIT = -0.7 * 65504.0


def can_fuse(query, key, mask, causal_start, weights_needed):
    """Whether `fused_dot_product_attention` computes this attention exactly.

    Args:
        query, key: (batch, q_len, heads, head_dim) and (batch, k_len, ...).
        mask: the general (batch, q_len, k_len) mask, or None.
        causal_start: None, or where the causal diagonal starts.
        weights_needed: whether the weights are returned or dropped out.

    Returns:
        True where there is no general mask, no weights are needed and the
        causal mask, if any, is the aligned one (`causal_start` the Python
        int 0 and as many queries as keys, both known when traced).
    """
    if weights_needed or mask is not None:
        return False
    if causal_start is None:
        return True
    aligned = isinstance(causal_start, int) and not isinstance(causal_start, bool)
    return (
        aligned
        and causal_start == 0
        and query.shape[1] is not None
        and query.shape[1] == key.shape[1]
    )


def key_padding_bias(key_mask, dtype):
    """(batch, 1, 1, k_len) additive bias: 0 for real keys, very negative else.

    The bias is in the compute dtype (what cuDNN's fused kernel takes), so
    its masked value is the most negative that dtype holds safely: a row
    of masked logits then stays finite (float16 overflows at -65504).
    """
    dtype = keras.backend.standardize_dtype(dtype)
    masked = FLOAT16_MASKED_LOGIT if dtype == "float16" else MASKED_LOGIT
    keep = ops.cast(key_mask, "bool")[:, None, None, :]
    return ops.where(keep, ops.cast(0.0, dtype), ops.cast(masked, dtype))


def fused_dot_product_attention(query, key, value, key_mask=None, causal=False,
                                scale=1.0):  # fmt: skip
    """softmax(Q K^T * scale + key padding bias, causal) V, by the backend.

    Args:
        query: (batch, q_len, num_heads, head_dim).
        key, value: (batch, k_len, kv_heads, head_dim), `kv_heads` dividing
            `num_heads`.
        key_mask: optional (batch, k_len) mask of the real keys.
        causal: query `t` sees keys `<= t` (as many queries as keys).
        scale: the logit scale.

    Returns:
        (batch, q_len, num_heads, head_dim) in the query's dtype; zeros for a
        query whose keys are all masked.

    Example:
    >>> q = k = v = np.random.rand(1, 3, 2, 4).astype("float32")
    >>> out = fused_dot_product_attention(q, k, v, [[1, 1, 0]], causal=True)
    >>> tuple(out.shape)
    (1, 3, 2, 4)
    """
    bias = None if key_mask is None else key_padding_bias(key_mask, query.dtype)
    outputs = ops.dot_product_attention(
        query, key, value, bias=bias, scale=scale, is_causal=causal
    )
    if key_mask is None:
        return outputs
    # Which queries see at least one key: any key (not causal), or any key at
    # or before their own position (causal).
    real = ops.cast(ops.cast(key_mask, "bool"), "int32")
    if causal:
        visible = ops.cumsum(real, axis=1) > 0  # (B, T)
    else:
        visible = ops.any(ops.cast(real, "bool"), axis=1, keepdims=True)  # (B, 1)
    visible = visible[:, :, None, None]
    return ops.where(visible, outputs, ops.zeros_like(outputs))


def fuses_on_this_backend():
    """Whether `dot_product_attention` sends fusable attention here (JAX)."""
    return keras.backend.backend() == "jax"

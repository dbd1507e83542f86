"""The scaled dot-product attention kernel shared by every attention layer."""

from keras import ops

# Finite, and far below any real logit: exp() of it underflows to 0 in float32.
# The logits are float32 when it is applied, so it never overflows float16.
MASKED_LOGIT = -1e9


def dot_product_attention(
    query, key, value, mask=None, scale=1.0, dropout_layer=None, training=None
):
    """softmax(Q K^T * scale, masked) V with grouped key/value heads.

    Args:
        query: (batch, q_len, num_heads, head_dim).
        key, value: (batch, k_len, kv_heads, head_dim); `num_heads` must be a
            multiple of `kv_heads` and query head `n` uses key/value head
            `n // (num_heads // kv_heads)`.
        mask: optional boolean (batch or 1, q_len, k_len), True = attend.
        scale: the logit scale, usually 1 / sqrt(head_dim).
        dropout_layer: optional dropout applied to the attention weights.
        training: passed to `dropout_layer`.

    Returns:
        `(outputs, weights)`: outputs (batch, q_len, num_heads, head_dim) in the
        query's dtype, weights (batch, num_heads, q_len, k_len) in float32. A
        query whose mask row is all False gets all-zero weights.
    """
    batch, q_len = ops.shape(query)[0], ops.shape(query)[1]
    num_heads, head_dim = query.shape[2], query.shape[3]
    kv_heads = key.shape[2]
    groups = num_heads // kv_heads
    query = ops.reshape(query, (batch, q_len, kv_heads, groups, head_dim))
    query = query * ops.cast(scale, query.dtype)
    logits = ops.einsum("btkgh,bskh->bkgts", query, key)  # (B, K, G, T, S)
    logits = ops.cast(logits, "float32")
    if mask is not None:
        mask = ops.cast(mask, "bool")[:, None, None]  # (B, 1, 1, T, S)
        logits = ops.where(mask, logits, MASKED_LOGIT)
    if logits.shape[-1] == 1:
        # One key (a one-token uncached pass): ops.softmax would warn.
        weights = ops.ones_like(logits)
    else:
        # One fused kernel; written out as exp/max/sum it was five without XLA.
        weights = ops.softmax(logits, axis=-1)
    if mask is not None:
        # A fully masked row would otherwise spread its weight uniformly.
        weights = ops.where(ops.any(mask, axis=-1, keepdims=True), weights, 0.0)
    returned_weights = ops.reshape(
        weights, (batch, num_heads, q_len, ops.shape(key)[1])
    )
    if dropout_layer is not None:
        weights = dropout_layer(weights, training=training)
    outputs = ops.einsum("bkgts,bskh->btkgh", ops.cast(weights, value.dtype), value)
    outputs = ops.reshape(outputs, (batch, q_len, num_heads, head_dim))
    return outputs, returned_weights

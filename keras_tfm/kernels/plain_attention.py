"""The untiled scaled dot-product attention, which forms every attention weight."""

from keras import ops

from keras_tfm.kernels.masks import MASKED_LOGIT


def grouped_logits(query, key, keep=None, bias=None, logit_soft_cap=None):
    """Float32 logits Q K^T, (batch, kv_heads, groups, q_len, k_len), masked.

    Args:
        query: (batch, q_len, num_heads, head_dim), already scaled.
        key: (batch, k_len, kv_heads, head_dim); query head `n` reads key
            head `n // (num_heads // kv_heads)`.
        keep: optional boolean mask broadcastable to the logits; where it is
            False `MASKED_LOGIT` is added to the logit.
        bias: optional float (batch or 1, num_heads, q_len, k_len) added to
            the logits (in float32) before the mask.
        logit_soft_cap: optional c: the logits become c * tanh(logits / c)
            before the bias and the mask (Gemma 2).

    Example:
    >>> q = np.ones((1, 2, 4, 3), "float32")
    >>> k = np.ones((1, 5, 2, 3), "float32")
    >>> tuple(grouped_logits(q, k).shape)
    (1, 2, 2, 2, 5)
    """
    batch, q_len = ops.shape(query)[0], ops.shape(query)[1]
    kv_heads, head_dim = key.shape[2], query.shape[3]
    groups = query.shape[2] // kv_heads
    query = ops.reshape(query, (batch, q_len, kv_heads, groups, head_dim))
    logits = ops.einsum("btkgh,bskh->bkgts", query, key)  # (B, K, G, T, S)
    logits = ops.cast(logits, "float32")
    if logit_soft_cap is not None:
        logits = logit_soft_cap * ops.tanh(logits / logit_soft_cap)
    if bias is not None:
        bias = ops.cast(bias, "float32")
        bias = ops.reshape(bias, (ops.shape(bias)[0], kv_heads, groups, q_len, -1))
        logits = logits + bias
    if keep is not None:
        # Added, not selected: LiteRT runs SELECT_V2 outside XNNPACK's graph.
        # The select here is on the mask alone, which every layer shares (the
        # converter keeps one); each layer adds it.
        masked = ops.cast(ops.where(keep, 0.0, MASKED_LOGIT), "float32")
        logits = logits + masked
    return logits


def plain_dot_product_attention(
    query,
    key,
    value,
    mask=None,
    scale=1.0,
    dropout_layer=None,
    training=None,
    bias=None,
    logit_soft_cap=None,
):
    """softmax(Q K^T * scale + bias, masked) V with grouped key/value heads.

    Args:
        query: (batch, q_len, num_heads, head_dim).
        key, value: (batch, k_len, kv_heads, head_dim); `num_heads` must be a
            multiple of `kv_heads` and query head `n` uses key/value head
            `n // (num_heads // kv_heads)`.
        mask: optional boolean (batch or 1, q_len, k_len), True = attend.
        scale: the logit scale, usually 1 / sqrt(head_dim).
        dropout_layer: optional dropout applied to the attention weights.
        training: passed to `dropout_layer`.
        bias: optional float (batch or 1, num_heads, q_len, k_len) added to
            the scaled logits before the mask (T5's relative position bias).
        logit_soft_cap: optional c: the scaled logits become
            c * tanh(logits / c) first (Gemma 2).

    Returns:
        `(outputs, weights)`: outputs (batch, q_len, num_heads, head_dim) in the
        query's dtype, weights (batch, num_heads, q_len, k_len) in float32. A
        query whose mask row is all False gets all-zero weights.

    Example:
    >>> q = k = v = np.random.rand(2, 3, 4, 8).astype("float32")
    >>> out, weights = plain_dot_product_attention(q, k, v)
    >>> bool(np.allclose(np.sum(weights, -1), 1.0))
    True
    """
    batch, q_len = ops.shape(query)[0], ops.shape(query)[1]
    num_heads, head_dim = query.shape[2], query.shape[3]
    query = query * ops.cast(scale, query.dtype)
    if mask is not None:
        mask = ops.cast(mask, "bool")[:, None, None]  # (B, 1, 1, T, S)
    logits = grouped_logits(query, key, mask, bias, logit_soft_cap)
    if logits.shape[-1] == 1:
        # One key (a one-token uncached pass): ops.softmax would warn.
        weights = ops.ones_like(logits)
    else:
        # One fused kernel; written out as exp/max/sum it was five without XLA.
        weights = ops.softmax(logits, axis=-1)
    if mask is not None:
        # A fully masked row would otherwise spread its weight uniformly.
        # (A product rather than a select, as in `grouped_logits`.)
        attended = ops.any(mask, axis=-1, keepdims=True)
        weights = weights * ops.cast(attended, weights.dtype)
    returned_weights = ops.reshape(
        weights, (batch, num_heads, q_len, ops.shape(key)[1])
    )
    if dropout_layer is not None:
        weights = dropout_layer(weights, training=training)
    outputs = ops.einsum("bkgts,bskh->btkgh", ops.cast(weights, value.dtype), value)
    outputs = ops.reshape(outputs, (batch, q_len, num_heads, head_dim))
    return outputs, returned_weights

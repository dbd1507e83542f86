"""The scaled dot-product attention kernel shared by every attention layer."""

from keras import ops

from keras_tfm.validation import check_positive_int

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


# Keys at least this long use the chunked path in `MultiHeadSelfAttention`:
# below it the plain path's (q_len, k_len) logits are small and one big matmul
# is faster than a loop.
CHUNKED_ATTENTION_MIN_LENGTH = 1024
# Each chunk's logits are (q_len, chunk) per head: at 4,096 tokens an encoder
# block's extra memory was 71 MB with chunks of 64 and 135 MB with 128 or 256
# (benchmarks/run.py memory section), and 64 was not slower.
DEFAULT_CHUNK_SIZE = 64


def chunked_dot_product_attention(
    query,
    key,
    value,
    key_mask=None,
    use_causal_mask=False,
    mask=None,
    scale=1.0,
    chunk_size=DEFAULT_CHUNK_SIZE,
):
    """Exact attention in memory linear in the key length (online softmax).

    The keys and values are processed `chunk_size` at a time with a running
    maximum and sum of the softmax (Milakov & Gimelshein, 2018; Dao et al.,
    2022, FlashAttention); the backward pass recomputes each chunk's weights
    from the saved log-sum-exp instead of storing the (q_len, k_len) matrix.
    It equals `dot_product_attention` to float32 rounding, gradients
    included, and follows its contract: float32 softmax, a query whose keys
    are all masked gets zero weights (zero output). Attention weights are
    never formed, so it returns only the outputs and has no dropout.

    Args:
        query: (batch, q_len, num_heads, head_dim).
        key, value: (batch, k_len, kv_heads, head_dim), grouped as in
            `dot_product_attention`.
        key_mask: optional boolean (batch, k_len), True for real keys.
        use_causal_mask: query `t` sees keys `<= t + k_len - q_len` (`<= t`
            in self-attention), built chunk by chunk.
        mask: optional general boolean (batch or 1, q_len, k_len) mask, read
            chunk by chunk (it is itself quadratic: prefer the two above).
        scale: the logit scale, usually 1 / sqrt(head_dim).
        chunk_size: keys per chunk; any k_len works (the last chunk is
            padded and masked).

    Returns:
        (batch, q_len, num_heads, head_dim) in the query's dtype.

    Example:
    >>> q = k = v = np.random.rand(2, 10, 4, 8).astype("float32")
    >>> out = chunked_dot_product_attention(q, k, v, chunk_size=4)
    >>> plain, _ = dot_product_attention(q, k, v)
    >>> bool(np.allclose(out, plain, atol=1e-6))
    True
    """
    check_positive_int("chunk_size", chunk_size)
    batch, q_len = ops.shape(query)[0], ops.shape(query)[1]
    k_len = ops.shape(key)[1]
    num_heads, head_dim = query.shape[2], query.shape[3]
    kv_heads = key.shape[2]
    groups = num_heads // kv_heads
    dtype = query.dtype
    num_chunks = (k_len + chunk_size - 1) // chunk_size
    padded = num_chunks * chunk_size

    def to_chunks(tensor):  # (B, S, K, H) -> (C, B, c, K, H)
        tensor = ops.pad(tensor, [[0, 0], [0, padded - k_len], [0, 0], [0, 0]])
        tensor = ops.reshape(tensor, (batch, num_chunks, chunk_size, kv_heads, -1))
        return ops.transpose(tensor, (1, 0, 2, 3, 4))

    # The per-chunk mask source: (C, B or 1, T or 1, c) booleans.
    valid = ops.arange(padded) < k_len
    if key_mask is not None:
        key_mask = ops.cast(key_mask, "bool")
        key_mask = ops.pad(key_mask, [[0, 0], [0, padded - k_len]])
        valid = ops.logical_and(valid[None], key_mask)  # (B, S')
    else:
        valid = valid[None]  # (1, S')
    valid = ops.transpose(
        ops.reshape(valid, (ops.shape(valid)[0], num_chunks, 1, chunk_size)),
        (1, 0, 2, 3),
    )
    if mask is not None:
        mask = ops.cast(mask, "bool")
        mask = ops.pad(mask, [[0, 0], [0, 0], [0, padded - k_len]])
        mask = ops.reshape(mask, (ops.shape(mask)[0], q_len, num_chunks, chunk_size))
        mask = ops.transpose(mask, (2, 0, 1, 3))  # (C, B|1, T, c)
    query_positions = ops.arange(q_len) + (k_len - q_len)

    def chunk_mask(j):  # (B|1, 1, 1, T|1, c)
        chunk = valid[j]
        if use_causal_mask:
            key_positions = ops.arange(chunk_size) + j * chunk_size
            causal = query_positions[:, None] >= key_positions[None, :]
            chunk = ops.logical_and(chunk, causal[None])
        if mask is not None:
            chunk = ops.logical_and(chunk, mask[j])
        return chunk[:, None, None]

    def logits_of(q, k_chunk):  # (B, K, G, T, c) float32
        return ops.cast(ops.einsum("bkgth,bskh->bkgts", q, k_chunk), "float32")

    @ops.custom_gradient
    def attend(q, k_chunks, v_chunks):
        # q: (B, K, G, T, H) already scaled.
        stats_shape = (batch, kv_heads, groups, q_len, 1)

        def forward_step(j, state):
            running_max, running_sum, accumulator = state
            keep = chunk_mask(j)
            logits = ops.where(keep, logits_of(q, k_chunks[j]), MASKED_LOGIT)
            new_max = ops.maximum(running_max, ops.max(logits, -1, keepdims=True))
            weights = ops.where(keep, ops.exp(logits - new_max), 0.0)
            correction = ops.exp(running_max - new_max)
            chunk_out = ops.einsum(
                "bkgts,bskh->bkgth", ops.cast(weights, v_chunks.dtype), v_chunks[j]
            )
            return (
                new_max,
                running_sum * correction + ops.sum(weights, -1, keepdims=True),
                accumulator * correction + ops.cast(chunk_out, "float32"),
            )

        init = (
            ops.full(stats_shape, MASKED_LOGIT, "float32"),
            ops.zeros(stats_shape, "float32"),
            ops.zeros((batch, kv_heads, groups, q_len, head_dim), "float32"),
        )
        running_max, running_sum, accumulator = ops.fori_loop(
            0, num_chunks, forward_step, init
        )
        attended = running_sum > 0.0  # False: every key masked.
        safe_sum = ops.where(attended, running_sum, 1.0)
        out32 = ops.where(attended, accumulator / safe_sum, 0.0)
        log_sum_exp = running_max + ops.log(safe_sum)
        out = ops.cast(out32, dtype)

        def grad(upstream):
            d_out = ops.cast(upstream, "float32")
            delta = ops.sum(d_out * out32, -1, keepdims=True)  # (B, K, G, T, 1)
            d_out_v = ops.cast(d_out, v_chunks.dtype)

            def backward_step(j, state):
                d_query, d_keys, d_values = state
                keep = chunk_mask(j)
                logits = logits_of(q, k_chunks[j])
                weights = ops.where(keep, ops.exp(logits - log_sum_exp), 0.0)
                d_value = ops.einsum(
                    "bkgts,bkgth->bskh", ops.cast(weights, d_out_v.dtype), d_out_v
                )
                d_weights = ops.cast(
                    ops.einsum("bkgth,bskh->bkgts", d_out_v, v_chunks[j]), "float32"
                )
                d_logits = ops.cast(weights * (d_weights - delta), dtype)
                d_query = d_query + ops.cast(
                    ops.einsum("bkgts,bskh->bkgth", d_logits, k_chunks[j]), "float32"
                )
                d_key = ops.einsum("bkgts,bkgth->bskh", d_logits, q)
                index = [j, 0, 0, 0, 0]
                d_keys = ops.slice_update(
                    d_keys, index, ops.cast(d_key, d_keys.dtype)[None]
                )
                d_values = ops.slice_update(
                    d_values, index, ops.cast(d_value, d_values.dtype)[None]
                )
                return d_query, d_keys, d_values

            d_query, d_keys, d_values = ops.fori_loop(
                0,
                num_chunks,
                backward_step,
                (
                    ops.zeros(ops.shape(q), "float32"),
                    ops.zeros(ops.shape(k_chunks), k_chunks.dtype),
                    ops.zeros(ops.shape(v_chunks), v_chunks.dtype),
                ),
            )
            return ops.cast(d_query, q.dtype), d_keys, d_values

        return out, grad

    query = ops.reshape(query, (batch, q_len, kv_heads, groups, head_dim))
    query = ops.transpose(query * ops.cast(scale, dtype), (0, 2, 3, 1, 4))
    out = attend(query, to_chunks(key), to_chunks(value))  # (B, K, G, T, H)
    out = ops.transpose(out, (0, 3, 1, 2, 4))
    return ops.reshape(out, (batch, q_len, num_heads, head_dim))

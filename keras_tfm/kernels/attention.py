"""Scaled dot-product attention: one function, which picks its own kernel.

`dot_product_attention` runs the plain kernel (`plain_dot_product_attention`,
every weight formed at once) or the tiled one (`chunked_dot_product_attention`,
memory linear in the length) as the shapes call for on TensorFlow; on JAX,
attention without returned scores, dropout or a general mask goes to
`keras.ops.dot_product_attention` (`fused_attention`: cuDNN's fused
attention on a GPU), the rest to the plain kernel. It returns
`(outputs, scores)` whatever it runs: the scores only with
`return_scores=True`, which takes the plain kernel. The masks are combined as
`masks.attention_mask` combines them.
"""

import keras
from keras import ops

from keras_tfm.kernels import fused_attention, plain_scope
from keras_tfm.kernels.chunked_attention import chunked_dot_product_attention
from keras_tfm.kernels.masks import attention_mask
from keras_tfm.kernels.plain_attention import plain_dot_product_attention

# Keys at least this long take the tiled kernel (decided when the graph runs
# if the length is unknown when it is traced): below it the plain kernel's
# (q_len, k_len) logits are small and one big matmul is faster than a loop.
CHUNKED_ATTENTION_MIN_LENGTH = 1024


def dot_product_attention(
    query,
    key,
    value,
    key_mask=None,
    mask=None,
    causal_start=None,
    scale=1.0,
    dropout_layer=None,
    training=None,
    return_scores=False,
    bias=None,
    logit_soft_cap=None,
):
    """`(outputs, scores)`: softmax(Q K^T * scale + bias, masked) V, tiled when long.

    On JAX, attention whose weights are not needed, without a general mask
    or a `bias` and with no causal mask or the aligned one, is
    `fused_attention`'s; on
    backends other than TensorFlow the rest is the plain kernel's. On
    TensorFlow the tiled kernel runs when the keys number
    `CHUNKED_ATTENTION_MIN_LENGTH` or more (a run-time choice when their
    number is unknown at trace time), unless the scores are asked for or
    attention dropout is active (both need the weights), or there is a
    single query (a decoding step: its logits are one row, which a tile of
    queries would only pad), or the
    number of keys is unknown inside `plain_scope.plain_kernels()` (a graph
    that only runs forward), or there is an additive `bias` (a full (q_len,
    k_len) matrix per head already). Both kernels give the same numbers to
    float32 rounding, gradients included.

    Args:
        query: (batch, q_len, num_heads, head_dim).
        key, value: (batch, k_len, kv_heads, head_dim), `kv_heads` dividing
            `num_heads` (grouped-query attention).
        key_mask: optional (batch, k_len) mask of the real keys.
        mask: optional general (batch or 1, q_len, k_len) mask.
        causal_start: None, or query `t` sees only keys `<= t + causal_start`
            (0 in self-attention, the cache index in cached decoding).
        scale: the logit scale, usually 1 / sqrt(head_dim).
        dropout_layer: optional dropout on the attention weights.
        training: passed to `dropout_layer`.
        return_scores: whether to return the attention weights.
        bias: optional float (batch or 1, num_heads, q_len, k_len) added to
            the scaled logits before the masks (T5's relative position bias).
        logit_soft_cap: optional c: the scaled logits become
            c * tanh(logits / c) before the bias and masks (Gemma 2's
            attention soft-capping); the plain kernel runs it at every
            length (neither fused nor tiled kernel has the step).

    Returns:
        Always a pair `(outputs, scores)`: outputs (batch, q_len, num_heads,
        head_dim) in the query's dtype (zeros for a query that may attend to
        nothing); scores None, or with `return_scores=True` the float32
        weights (batch, num_heads, q_len, k_len), before dropout.

    Example:
    >>> q = k = v = np.random.rand(1, 3, 2, 4).astype("float32")
    >>> out, scores = dot_product_attention(q, k, v, causal_start=0)
    >>> out.shape, scores
    (TensorShape([1, 3, 2, 4]), None)
    >>> _, scores = dot_product_attention(
    ...     q, k, v, causal_start=0, return_scores=True)
    >>> np.round(np.asarray(scores)[0, 0, 0], 3).tolist()
    [1.0, 0.0, 0.0]
    """
    query_length, key_length = query.shape[1], key.shape[1]
    weights_needed = return_scores or (dropout_layer is not None and bool(training))
    plain_only = bias is not None or logit_soft_cap is not None
    if (
        not plain_only
        and fused_attention.fuses_on_this_backend()
        and fused_attention.can_fuse(query, key, mask, causal_start, weights_needed)
    ):
        outputs = fused_attention.fused_dot_product_attention(
            query, key, value, key_mask, causal_start is not None, scale
        )
        return outputs, None
    if (
        weights_needed
        or plain_only
        # The tiled kernel's loops are TensorFlow's.
        or keras.backend.backend() != "tensorflow"
        or query_length == 1
        or (key_length is not None and key_length < CHUNKED_ATTENTION_MIN_LENGTH)
        or (key_length is None and plain_scope.active())
    ):
        combined = attention_mask(
            ops.shape(query)[1], ops.shape(key)[1], key_mask, mask, causal_start
        )
        outputs, scores = plain_dot_product_attention(
            query, key, value, mask=combined, scale=scale,
            dropout_layer=dropout_layer, training=training, bias=bias,
            logit_soft_cap=logit_soft_cap,
        )  # fmt: skip
        return outputs, scores if return_scores else None
    outputs = chunked_dot_product_attention(
        query,
        key,
        value,
        key_mask=key_mask,
        use_causal_mask=causal_start is not None,
        mask=mask,
        scale=scale,
        causal_start=causal_start,
        plain_below=None if key_length is not None else CHUNKED_ATTENTION_MIN_LENGTH,
    )
    return outputs, None

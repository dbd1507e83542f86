"""A language model's cross-entropy from its hidden states, without its logits.

The (tokens, vocabulary) logits are the largest tensors of a causal LM's
train step: 1,536 tokens of SmolLM2's 49,152-word vocabulary are 302 MB in
float32, and autodiff keeps them, their softmax and their gradient. Here
the logits `h E^T` exist one chunk of tokens at a time: the forward pass
keeps each token's log-sum-exp, and the backward pass recomputes each
chunk's softmax to form the gradients (the fused linear cross-entropy of
Liger's kernels and Apple's cut-cross-entropy, in Keras ops). The products
run in the hidden states' dtype (bfloat16 under `mixed_bfloat16`), the
log-sum-exp, the loss and the summed gradient of `E` in float32.
"""

from keras import ops

from keras_tfm.validation import check_positive_int, check_rate

# Logit elements per chunk: 64 MB of float32 (256 tokens of a 65,536 vocabulary).
DEFAULT_CHUNK_ELEMENTS = 2**24


def default_chunk_size(vocabulary_size):
    """Tokens per chunk: `DEFAULT_CHUNK_ELEMENTS` logits, at least one token."""
    return max(1, DEFAULT_CHUNK_ELEMENTS // int(vocabulary_size))


def linear_cross_entropy(hidden, table, labels, label_smoothing=0.0, chunk_size=None):
    """Per-token cross-entropy of the logits `hidden @ table^T`, in chunks.

        z_t    = E h_t                       (never formed whole)
        loss_t = logsumexp(z_t) - (1 - eps) z_t[y_t] - eps * mean(z_t)

    Equal to `sparse_categorical_crossentropy(labels, hidden @ table^T,
    from_logits=True)` (with label smoothing eps) to float rounding, its
    gradients with respect to `hidden` and `table` included.

    Args:
        hidden: (..., hidden_dim) float.
        table: (vocabulary_size, hidden_dim): the tied token embedding, or
            an output projection's kernel transposed.
        labels: int (...), each in `[0, vocabulary_size)` (a caller masks
            and replaces ignored labels before).
        label_smoothing: eps in [0, 1).
        chunk_size: tokens per chunk; default `default_chunk_size(V)`.

    Returns:
        float32 losses of the labels' shape.

    Example:
    >>> h = np.random.rand(2, 3, 4).astype("float32")
    >>> table = np.random.rand(7, 4).astype("float32")
    >>> y = np.array([[1, 2, 3], [4, 5, 6]])
    >>> plain = keras.losses.sparse_categorical_crossentropy(
    ...     y, h @ table.T, from_logits=True)
    >>> loss = linear_cross_entropy(h, table, y, chunk_size=4)
    >>> bool(np.allclose(loss, plain, atol=1e-5))
    True
    """
    eps = check_rate("label_smoothing", label_smoothing)
    hidden = ops.convert_to_tensor(hidden)
    dtype = hidden.dtype
    # A tensor of the compute dtype: the gradient reaches the variable (and
    # its float32 copy) through the cast, outside the custom gradient.
    table = ops.cast(ops.convert_to_tensor(table), dtype)
    vocabulary_size, hidden_dim = table.shape
    largest = check_positive_int(
        "chunk_size", chunk_size or default_chunk_size(vocabulary_size)
    )
    labels = ops.convert_to_tensor(labels)
    shape = ops.shape(labels)
    rows = ops.reshape(hidden, (-1, hidden_dim))
    ids = ops.reshape(ops.cast(labels, "int32"), (-1,))
    num_rows = ops.shape(rows)[0]  # a tensor where the batch is unknown
    # Equal chunks of at most `largest` tokens: a few tokens are one small
    # chunk, not one padded to `largest`.
    num_chunks = (num_rows + largest - 1) // largest
    at_least_one = (
        max(num_chunks, 1)
        if isinstance(num_chunks, int)
        else (ops.maximum(num_chunks, 1))
    )
    chunk = (num_rows + at_least_one - 1) // at_least_one
    f32 = "float32"

    def to_chunks(tensor):  # (rows, ...) -> (chunks, chunk, ...), zero-padded
        padding = [[0, num_chunks * chunk - num_rows]] + [[0, 0]] * (
            len(tensor.shape) - 1
        )
        tensor = ops.pad(tensor, padding)
        return ops.reshape(tensor, (num_chunks, chunk, *tensor.shape[1:]))

    def from_chunks(tensor):
        return ops.reshape(tensor, (-1, *tensor.shape[2:]))[:num_rows]

    def chunk_logits(x, table):
        return ops.cast(ops.matmul(x, ops.transpose(table)), f32)

    @ops.custom_gradient
    def token_losses(rows, table):
        chunks = to_chunks(rows)

        def forward_step(j, lse):
            row_lse = ops.logsumexp(chunk_logits(chunks[j], table), axis=-1)
            return ops.slice_update(lse, [j, 0], row_lse[None])

        lse = ops.fori_loop(
            0, num_chunks, forward_step, ops.zeros((num_chunks, chunk), f32)
        )
        lse = from_chunks(lse)
        rows32 = ops.cast(rows, f32)
        targets32 = ops.cast(ops.take(table, ids, axis=0), f32)
        losses = lse - (1.0 - eps) * ops.sum(rows32 * targets32, axis=-1)
        if eps:
            mean_row = ops.mean(ops.cast(table, f32), axis=0)
            losses = losses - eps * ops.matmul(rows32, mean_row)

        def grad(upstream):
            upstream = ops.cast(upstream, f32)
            chunked_upstream, chunked_lse = to_chunks(upstream), to_chunks(lse)

            def backward_step(j, state):
                d_chunks, d_table = state
                x, d_loss = chunks[j], chunked_upstream[j]
                probs = ops.exp(chunk_logits(x, table) - chunked_lse[j][:, None])
                # d loss / d z = softmax - eps / V, less the label's (1 - eps)
                # (added below, from the label rows alone).
                d_logits = ops.cast(
                    (probs - eps / vocabulary_size) * d_loss[:, None], dtype
                )
                d_x = ops.matmul(d_logits, table)
                d_chunks = ops.slice_update(d_chunks, [j, 0, 0], d_x[None])
                d_table = d_table + ops.cast(
                    ops.matmul(ops.transpose(d_logits), x), f32
                )
                return d_chunks, d_table

            init = (ops.zeros_like(chunks), ops.zeros(table.shape, f32))
            d_chunks, d_table = ops.fori_loop(0, num_chunks, backward_step, init)
            label_weight = (1.0 - eps) * upstream[:, None]
            d_rows = ops.cast(from_chunks(d_chunks), f32) - label_weight * targets32
            d_table = d_table - ops.segment_sum(
                label_weight * rows32, ids, num_segments=vocabulary_size
            )
            return ops.cast(d_rows, dtype), ops.cast(d_table, dtype)

        return losses, grad

    return ops.reshape(token_losses(rows, table), shape)

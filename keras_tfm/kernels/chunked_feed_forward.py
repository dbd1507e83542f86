"""The feed-forward network in memory that does not grow with its inner width.

For long sequences the (tokens, intermediate_dim) hidden activations are the
largest tensors of a Transformer block's backward pass: autodiff keeps them
from the forward pass and forms as many again for their gradients. Here the
tokens are processed `chunk_size` at a time and the backward pass recomputes
each chunk's hidden activations, so only one chunk's exist at once.
"""

from keras import ops

from keras_tfm.kernels.activations import ACTIVATION_FUNCTIONS, ACTIVATIONS
from keras_tfm.validation import check_choice, check_positive_int

# Sequences at least this long run the chunked path in `FeedForward`.
CHUNKED_FEED_FORWARD_MIN_LENGTH = 1024
DEFAULT_FEED_FORWARD_CHUNK = 512


def chunked_feed_forward(
    inputs,
    intermediate_kernel,
    intermediate_bias,
    output_kernel,
    output_bias,
    activation="relu",
    chunk_size=DEFAULT_FEED_FORWARD_CHUNK,
    plain_below=None,
):
    """`act(x W1 + b1) W2 + b2` over chunks of tokens, recomputed in backward.

    Equal to the plain computation to float rounding, gradients included
    (weights' gradients are summed over chunks in float32).

    Args:
        inputs: (..., hidden_dim).
        intermediate_kernel: (hidden_dim, width), width = intermediate_dim or
            2 * intermediate_dim for a gated activation (gate first, then up).
        intermediate_bias: (width,).
        output_kernel: (intermediate_dim, hidden_dim).
        output_bias: (hidden_dim,).
        activation: a name from `activations.ACTIVATIONS`.
        chunk_size: tokens per chunk; any number of tokens works.
        plain_below: optional sequence length (the inputs' second-to-last
            axis) under which the unchunked computation runs instead, chosen
            when the graph runs (for lengths unknown when it is traced); it
            keeps the hidden activations for its backward pass, as autodiff
            would.

    Returns:
        A tensor of the inputs' shape and dtype.

    Example:
    >>> x = np.random.rand(2, 10, 4).astype("float32")
    >>> w1, b1 = np.random.rand(4, 8), np.zeros(8)
    >>> w2, b2 = np.random.rand(8, 4), np.zeros(4)
    >>> out = chunked_feed_forward(x, w1, b1, w2, b2, chunk_size=3)
    >>> bool(np.allclose(out, np.maximum(x @ w1, 0) @ w2, atol=1e-5))
    True
    """
    check_positive_int("chunk_size", chunk_size)
    check_choice("activation", activation, ACTIVATIONS)
    activate = ACTIVATION_FUNCTIONS[activation].with_derivative
    inputs = ops.convert_to_tensor(inputs)
    dtype = inputs.dtype
    # As tensors: the gradient reaches variables (and LoRA factors) through
    # the reads, outside the custom gradient.
    weights = [
        ops.cast(ops.convert_to_tensor(w), dtype)
        for w in (intermediate_kernel, intermediate_bias, output_kernel, output_bias)
    ]
    shape = ops.shape(inputs)
    hidden_dim = inputs.shape[-1]
    rows = ops.reshape(inputs, (-1, hidden_dim))
    num_rows = ops.shape(rows)[0]
    num_chunks = (num_rows + chunk_size - 1) // chunk_size
    use_plain = False
    if plain_below is not None:
        check_positive_int("plain_below", plain_below)
        use_plain = shape[-2] < plain_below

    def to_chunks(tensor):
        tensor = ops.pad(tensor, [[0, num_chunks * chunk_size - num_rows], [0, 0]])
        return ops.reshape(tensor, (num_chunks, chunk_size, ops.shape(tensor)[-1]))

    def from_chunks(tensor):
        return ops.reshape(tensor, (-1, ops.shape(tensor)[-1]))[:num_rows]

    @ops.custom_gradient
    def feed_forward(rows, w1, b1, w2, b2):
        def plain_forward():
            hidden = ops.matmul(rows, w1) + b1
            activated, _ = activate(hidden)
            return ops.matmul(activated, w2) + b2, hidden

        def chunked_forward(placeholder=True):
            chunks = to_chunks(rows)

            def forward_step(j, outputs):
                activated, _ = activate(ops.matmul(chunks[j], w1) + b1)
                out = ops.matmul(activated, w2) + b2
                return ops.slice_update(outputs, [j, 0, 0], out[None])

            outputs = ops.fori_loop(0, num_chunks, forward_step, ops.zeros_like(chunks))
            # The run-time switch's branches return the same tensors: the
            # plain one's hidden activations, unused here (and removed by
            # XLA, which sees which branch runs).
            width = ops.shape(w1)[-1]
            hidden = ops.zeros((num_rows, width), dtype) if placeholder else None
            return from_chunks(outputs), hidden

        if plain_below is None:
            outputs, hidden = chunked_forward(placeholder=False)
        else:
            outputs, hidden = ops.cond(use_plain, plain_forward, chunked_forward)

        def grad(upstream):
            upstream = ops.cast(upstream, dtype)

            def plain_backward():
                activated, derivative = activate(hidden)
                d_hidden = derivative(ops.matmul(upstream, ops.transpose(w2)))
                return (
                    ops.matmul(d_hidden, ops.transpose(w1)),
                    ops.matmul(ops.transpose(rows), d_hidden),
                    ops.sum(d_hidden, axis=0),
                    ops.matmul(ops.transpose(activated), upstream),
                    ops.sum(upstream, axis=0),
                )

            def chunked_backward():
                chunks, d_outputs = to_chunks(rows), to_chunks(upstream)

                def backward_step(j, state):
                    d_chunks, d_w1, d_b1, d_w2, d_b2 = state
                    x, d_out = chunks[j], d_outputs[j]
                    activated, derivative = activate(ops.matmul(x, w1) + b1)
                    d_hidden = derivative(ops.matmul(d_out, ops.transpose(w2)))
                    d_x = ops.matmul(d_hidden, ops.transpose(w1))
                    d_chunks = ops.slice_update(d_chunks, [j, 0, 0], d_x[None])
                    f32 = "float32"
                    return (
                        d_chunks,
                        d_w1 + ops.cast(ops.matmul(ops.transpose(x), d_hidden), f32),
                        d_b1 + ops.cast(ops.sum(d_hidden, axis=0), f32),
                        d_w2
                        + ops.cast(ops.matmul(ops.transpose(activated), d_out), f32),
                        d_b2 + ops.cast(ops.sum(d_out, axis=0), f32),
                    )

                init = (ops.zeros_like(chunks),) + tuple(
                    ops.zeros(ops.shape(w), "float32") for w in (w1, b1, w2, b2)
                )
                d_chunks, *d_weights = ops.fori_loop(0, num_chunks, backward_step, init)
                return (
                    from_chunks(d_chunks),
                    *(ops.cast(d, dtype) for d in d_weights),
                )

            if plain_below is None:
                return chunked_backward()
            return ops.cond(use_plain, plain_backward, chunked_backward)

        return outputs, grad

    outputs = feed_forward(rows, *weights)
    return ops.reshape(outputs, shape)

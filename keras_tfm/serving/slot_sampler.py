"""Per-row sampling for the slots of a batch: each row its own settings.

`sample_tokens` is the one function the slot decoder calls; it is written
so that a row's token depends on that row alone (its logits, its settings,
its seed and the position sampled), never on the other rows of the batch,
which is what makes a request's output the same alone or beside others.

Randomness is counter-based: the uniform number of row b is a hash of
(seed[b], position[b]) (MurmurHash3's 32-bit finalizer), not a draw from a
stateful generator shared by the batch.
"""

from keras import ops

_MIX_1, _MIX_2, _GOLDEN = 0x85EBCA6B, 0xC2B2AE35, 0x9E3779B9


def _fmix32(h):
    """MurmurHash3's finalizer on a uint32 tensor: every bit mixed."""
    h = ops.bitwise_xor(h, ops.right_shift(h, 16))
    h = ops.multiply(h, ops.convert_to_tensor(_MIX_1, "uint32"))
    h = ops.bitwise_xor(h, ops.right_shift(h, 13))
    h = ops.multiply(h, ops.convert_to_tensor(_MIX_2, "uint32"))
    return ops.bitwise_xor(h, ops.right_shift(h, 16))


def row_uniform(seed, position):
    """A float32 in [0, 1) per row from int32 (batch,) seeds and positions.

    Example:
    >>> from keras_tfm.serving.slot_sampler import row_uniform
    >>> u = np.asarray(row_uniform(np.array([1, 1, 2]), np.array([5, 6, 5])))
    >>> bool(((u >= 0) & (u < 1)).all()), len(set(u.tolist()))
    (True, 3)
    """
    seed = ops.cast(ops.cast(seed, "int64") % (2**32), "uint32")
    position = ops.cast(ops.cast(position, "int64") % (2**32), "uint32")
    golden = ops.convert_to_tensor(_GOLDEN, "uint32")
    h = _fmix32(ops.bitwise_xor(_fmix32(seed), ops.multiply(position, golden)))
    return ops.cast(ops.right_shift(h, 8), "float32") / float(2**24)


def sample_tokens(logits, temperature, top_p, seed, position):
    """The next token of each row: greedy where `temperature` is 0.

    Elsewhere the logits are divided by the temperature, the smallest set
    of tokens whose probability reaches `top_p` is kept (nucleus sampling)
    and a token is drawn from it by inverting the cumulative distribution
    at `row_uniform(seed, position)`.

    Args:
        logits: float32 (batch, vocabulary_size).
        temperature, top_p: float32 (batch,).
        seed, position: int32 (batch,); the position is the one of the
            token sampled, so that every step draws a new number.

    Returns:
        int32 (batch,) token ids.

    Example:
    >>> from keras_tfm.serving.slot_sampler import sample_tokens
    >>> logits = np.array([[0.0, 3.0, 1.0]], "float32")
    >>> int(sample_tokens(logits, np.zeros(1, "float32"), np.ones(1, "float32"),
    ...                   np.zeros(1, "int32"), np.zeros(1, "int32"))[0])
    1
    """
    greedy = ops.cast(ops.argmax(logits, axis=-1), "int32")

    def draw():
        scaled = logits / ops.expand_dims(ops.maximum(temperature, 1e-6), 1)
        probabilities = ops.softmax(scaled, axis=-1)
        order = ops.cast(ops.argsort(-probabilities, axis=-1), "int32")
        sorted_p = ops.take_along_axis(probabilities, order, axis=-1)
        before = ops.cumsum(sorted_p, axis=-1) - sorted_p
        # The first token is always kept; then until top_p is reached.
        kept = ops.where(before < ops.expand_dims(top_p, 1), sorted_p, 0.0)
        cumulative = ops.cumsum(kept, axis=-1)
        target = row_uniform(seed, position) * cumulative[:, -1]
        choice = ops.sum(ops.cast(cumulative <= target[:, None], "int32"), axis=-1)
        count = ops.sum(ops.cast(kept > 0, "int32"), axis=-1)
        choice = ops.minimum(choice, ops.maximum(count - 1, 0))
        drawn = ops.take_along_axis(order, choice[:, None], axis=-1)[:, 0]
        return ops.where(temperature > 0, drawn, greedy)

    return ops.cond(ops.any(temperature > 0), draw, lambda: greedy)

"""Token positions from a cache index: one start for the batch, or one per row.

Cached decoding writes `inputs` at `cache_update_index`: an int or a scalar
tensor when every row is at the same position (`generate`), or a (batch,)
vector when each row has its own (the continuous batching of
`keras_tfm.serving`, where every slot holds a request of its own length).
"""

from keras import ops


def is_per_row(start_index):
    """Whether `start_index` is a (batch,) vector rather than a scalar."""
    return start_index is not None and len(getattr(start_index, "shape", ())) == 1


def positions(start_index, length):
    """float32 positions: (seq,) from a scalar start, (batch, seq) per row.

    Example:
    >>> from keras_tfm.layers.positions import positions
    >>> np.asarray(positions(np.array([0, 5], "int32"), 2)).tolist()
    [[0.0, 1.0], [5.0, 6.0]]
    """
    steps = ops.cast(ops.arange(length), "float32")
    if is_per_row(start_index):
        return ops.expand_dims(ops.cast(start_index, "float32"), 1) + steps
    return steps + ops.cast(start_index, "float32")

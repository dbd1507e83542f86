"""Pooling a sequence of hidden states into one vector per sequence."""

from keras import ops


def mean_pool(hidden, padding_mask):
    """The mean of `hidden` (batch, seq, dim) over real tokens: (batch, dim).

        pooled = sum_t m_t h_t / max(sum_t m_t, 1)

    Padding never changes the result; a row without real tokens pools to zeros.

    Example:
    >>> hidden = np.array([[[1.0, 2.0], [3.0, 4.0], [9.0, 9.0]]], "float32")
    >>> ops.convert_to_numpy(mean_pool(hidden, np.array([[1, 1, 0]])))
    array([[2., 3.]], dtype=float32)
    """
    mask = ops.expand_dims(ops.cast(padding_mask, hidden.dtype), -1)
    count = ops.maximum(ops.sum(mask, axis=1), 1.0)
    return ops.sum(hidden * mask, axis=1) / count

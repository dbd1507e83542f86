"""Building and merging attention masks, for the kernels and the layers.

One convention everywhere: a mask is boolean-like, 1 (True) means "attend"
and 0 (False) means "do not attend". A padding mask has shape
(batch, seq) and marks real tokens with 1; an attention mask has shape
(batch, query_len, key_len).
"""

from keras import ops

from keras_tfm._keras_compat import get_keras_mask

# Finite, and far below any real logit: exp() of it underflows to 0 in float32.
# The logits are float32 when it is applied, so it never overflows float16.
MASKED_LOGIT = -1e9


def causal_mask(query_length, key_length, start_index=0):
    """A (1, query_len, key_len) mask letting query `i` see keys `<= start_index+i`.

    `start_index` is the absolute position of the first query, as in cached
    decoding where the keys hold the whole cache.

    Example:
    >>> ops.convert_to_numpy(causal_mask(2, 3, start_index=1)).astype(int)
    array([[[1, 1, 0],
            [1, 1, 1]]])
    """
    query_positions = ops.arange(query_length) + start_index
    key_positions = ops.arange(key_length)
    mask = ops.expand_dims(query_positions, 1) >= ops.expand_dims(key_positions, 0)
    return ops.expand_dims(mask, 0)


def key_padding_mask(padding_mask):
    """Turns a (batch, key_len) padding mask into a (batch, 1, key_len) mask."""
    return ops.expand_dims(ops.cast(padding_mask, "bool"), 1)


def merge_masks(*masks):
    """Logical AND of the masks that are not `None`; `None` if all are."""
    merged = None
    for mask in masks:
        if mask is None:
            continue
        mask = ops.cast(mask, "bool")
        merged = mask if merged is None else ops.logical_and(merged, mask)
    return merged


def attention_mask(query_length, key_length, key_mask=None, mask=None,
                   causal_start=None):  # fmt: skip
    """The AND of the three masks attention takes, (batch or 1, q_len, k_len).

    Args:
        query_length, key_length: the lengths (ints or scalar tensors).
        key_mask: optional (batch, k_len) padding mask of the keys.
        mask: optional general (batch or 1, q_len, k_len) mask.
        causal_start: None for no causal mask, else query `t` sees keys
            `<= t + causal_start` (see `causal_mask`).

    Returns:
        A boolean mask, or None when all three are None.

    Example:
    >>> mask = attention_mask(2, 3, key_mask=[[1, 1, 0]], causal_start=1)
    >>> ops.convert_to_numpy(mask).astype(int)
    array([[[1, 1, 0],
            [1, 1, 0]]])
    """
    return merge_masks(
        None if key_mask is None else key_padding_mask(key_mask),
        mask,
        None
        if causal_start is None
        else causal_mask(query_length, key_length, causal_start),
    )


def implicit_mask(tensor):
    """The Keras mask attached to `tensor` (e.g. by `Embedding(mask_zero=True)`)."""
    return get_keras_mask(tensor)

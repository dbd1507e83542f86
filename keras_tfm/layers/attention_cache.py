import dataclasses
from typing import Any


@dataclasses.dataclass(frozen=True)
class AttentionCache:
    """A key/value cache and where a call writes into it, as one argument.

    `MultiHeadSelfAttention` and `DecoderBlock` take it as `cache` and return
    `(outputs, cache)`, where the returned cache is the updated storage
    (the `cache` field's type), ready to be wrapped again at the next index.
    A plain object rather than a tuple: Keras would check a nested call
    argument for tensors beside a Python `update_index`, and an index of 0
    given as a Python int is how a prefill is recognised.

    Fields:
        cache: the storage, a tensor (batch, 2, max_length, kv_heads,
            head_dim) from `empty_cache` or `compute_key_value_cache` (or an
            int8 `keras_tfm.kernels.kv_cache.Int8Cache`).
        update_index: where the keys and values of the call's `inputs` are
            written: an int or scalar tensor (the position of `inputs`' first
            token), or a (batch,) int vector with a position per row. None
            (the default): the cache is only read, as cross-attention reads
            the precomputed keys and values of an encoder's output.

    Example:
    >>> attention = keras_tfm.layers.MultiHeadSelfAttention(num_heads=2)
    >>> x = np.random.rand(1, 3, 8).astype("float32")
    >>> _ = attention(x)  # builds the layer
    >>> cache = attention.empty_cache(batch_size=1, max_length=4)
    >>> out, cache = attention(x, use_causal_mask=True,
    ...                        cache=keras_tfm.layers.AttentionCache(cache, 0))
    >>> out.shape, cache.shape
    (TensorShape([1, 3, 8]), TensorShape([1, 2, 4, 2, 4]))
    """

    cache: Any
    update_index: Any = None

    @property
    def is_read_only(self):
        """Whether the call only reads the cache (no `update_index`)."""
        return self.update_index is None

"""Key/value cache storage: float, or int8 with one scale per token and head.

A float cache is one tensor (batch, 2, max_length, kv_heads, head_dim), keys
at index 0 and values at 1. An int8 cache is an `Int8Cache` of the same
layout in int8 plus float32 scales (batch, 2, max_length, kv_heads, 1):
each token's key (and value) vector of each head is stored as

    scale = max_i |x_i| / 127          (1 when the vector is all zeros)
    q_i   = round(x_i / scale)         in [-127, 127]
    x_i  ~= q_i * scale                (error at most scale / 2)

so that memory is 1 + 4 / head_dim bytes per number instead of 4
(3.76x less at head_dim 64). The attention layer writes through `write`
and reads the keys and values back, dequantized, through `read`: the
rest of the model never sees the storage.

Example:
>>> cache = empty_cache((1, 2, 4, 1, 2), "float32", "int8")
>>> x = np.array([[[[0.5, -1.0]]]], "float32")  # (batch, 1 token, 1 head, 2)
>>> cache = write(cache, 1, x, 2 * x)
>>> keys, values = read(cache, "float32")
>>> [round(float(v), 4) for v in values[0, 1, 0]]  # 1 is stored as 64 / 63.5
[1.0079, -2.0]
"""

from collections import namedtuple

from keras import ops

from keras_tfm.kernels.trace_setting import TraceSetting

KV_CACHE_DTYPES = (None, "int8")
"""The cache storages: None (the layer's compute dtype) or "int8"."""

INT8_MAX = 127.0

Int8Cache = namedtuple("Int8Cache", ["values", "scales"])
Int8Cache.__doc__ = """An int8 key/value cache: int8 `values` (batch, 2, max_length,
kv_heads, head_dim) and float32 `scales` (batch, 2, max_length, kv_heads, 1)."""


def check_kv_cache_dtype(kv_cache_dtype):
    """`kv_cache_dtype` if it is one of `KV_CACHE_DTYPES`, else a ValueError."""
    if kv_cache_dtype not in KV_CACHE_DTYPES:
        raise ValueError(
            f"`kv_cache_dtype` must be one of {list(KV_CACHE_DTYPES)}. "
            f"Received: kv_cache_dtype={kv_cache_dtype!r}"
        )
    return kv_cache_dtype


def quantize(x):
    """`(q, scale)`: int8 `x` over its last axis, with float32 scales (..., 1).

    Example:
    >>> q, scale = quantize(np.array([[1.0, -0.5, 0.25]], "float32"))
    >>> ops.convert_to_numpy(q).tolist(), round(float(scale[0, 0]) * 127, 6)
    ([[127, -64, 32]], 1.0)
    """
    x = ops.cast(x, "float32")
    largest = ops.max(ops.abs(x), axis=-1, keepdims=True)
    scale = ops.where(largest > 0, largest / INT8_MAX, ops.ones_like(largest))
    q = ops.clip(ops.round(x / scale), -INT8_MAX, INT8_MAX)
    return ops.cast(q, "int8"), scale


def dequantize(q, scale, dtype="float32"):
    """`q * scale` in `dtype`."""
    return ops.cast(ops.cast(q, "float32") * scale, dtype)


def empty_cache(shape, dtype, kv_cache_dtype=None):
    """A zero cache of `shape` (batch, 2, max_length, kv_heads, head_dim)."""
    if check_kv_cache_dtype(kv_cache_dtype) is None:
        return ops.zeros(shape, dtype=dtype)
    return Int8Cache(
        ops.zeros(shape, dtype="int8"),
        ops.ones((*shape[:-1], 1), dtype="float32"),
    )


def values_of(cache):
    """The tensor that holds the cache's layout (its int8 values, or itself)."""
    return cache.values if isinstance(cache, Int8Cache) else cache


def slice_write(tensor, update, index):
    """`tensor` (B, 2, S, ...) with `update` (B, 2, T, ...) at position `index`."""
    return ops.slice_update(
        tensor, [0, 0, index] + [0] * (len(update.shape) - 3), update
    )


def write(cache, index, key, value, write_at=slice_write):
    """`cache` with `key` and `value` (batch, seq, kv_heads, head_dim) at `index`.

    `write_at(tensor, update, index)` writes (batch, 2, seq, ...) into each
    tensor of the cache: by default one in-place slice update (rather than
    two updates and a stack, which copied the whole cache at every step);
    the attention layer passes its writer, which also takes a (batch,)
    vector of indices, one per row.
    """
    update = pair(key, value)  # (B, 2, S, K, H)
    if not isinstance(cache, Int8Cache):
        return write_at(cache, update, index)
    q, scale = quantize(update)
    return Int8Cache(
        write_at(cache.values, q, index), write_at(cache.scales, scale, index)
    )


_window = TraceSetting()


def read_window(length):
    """A scope in which `read` returns a cache's first `length` positions.

    A step that only ever runs with its newest token below `length` (the
    positions past it masked anyway) attends over those alone: the LiteRT
    decoding step's `decode_<length>` signatures
    (`keras_tfm.export.litert_decoder`), whose attention then reads and
    packs `length` cached positions rather than the whole buffer.

    Example:
    >>> cache = empty_cache((1, 2, 8, 1, 2), "float32")
    >>> with read_window(4):
    ...     key, value = read(cache, "float32")
    >>> tuple(key.shape)
    (1, 4, 1, 2)
    """
    return _window.set(length)


def read(cache, dtype):
    """`(key, value)`, each (batch, max_length, kv_heads, head_dim) in `dtype`
    (the first `length` positions inside `read_window(length)`)."""
    length = _window.get()
    if length is not None and not isinstance(cache, Int8Cache):
        return _window_halves(cache, length)
    if length is not None:
        cache = Int8Cache(*(_window_halves(part, length) for part in cache))
        return tuple(map(dequantize, cache.values, cache.scales, (dtype,) * 2))
    if isinstance(cache, Int8Cache):
        cache = dequantize(cache.values, cache.scales, dtype)
    return halves(cache, axis=1)


def _window_halves(cache, length):
    """The key and value halves of `cache` (B, 2, S, ...), each cut to its
    first `length` positions: two static slices, which XNNPACK takes (a
    slice of both then a split copied the window twice)."""
    shape = list(cache.shape)
    shape[0] = ops.shape(cache)[0]
    shape[1] = 1
    shape[2] = length if shape[2] is None else min(length, shape[2])
    starts = [0] * len(shape)
    key = ops.slice(cache, starts, shape)
    value = ops.slice(cache, [0, 1] + starts[2:], shape)
    return ops.squeeze(key, 1), ops.squeeze(value, 1)


def halves(tensor, axis):
    """The two halves of `tensor` (size 2 along `axis`), that axis dropped.

    One split, not an unstack or two slices: LiteRT runs an unstack
    (`UNPACK`) and a stack (`PACK`) through its builtin kernels outside
    XNNPACK's graph (cutting it in two at each attention layer; 11% of
    SmolLM2's int8 decoding step was `UNPACK`'s copies), and `cache[:, 0]`
    through its element-by-element `STRIDED_SLICE`; XNNPACK takes `SPLIT`.
    Its gradient is one concatenation.

    Example:
    >>> key, value = halves(np.arange(4.0).reshape(1, 2, 2), axis=1)
    >>> ops.convert_to_numpy(value).tolist()
    [[2.0, 3.0]]
    """
    first, second = ops.split(tensor, 2, axis=axis)
    return ops.squeeze(first, axis), ops.squeeze(second, axis)


def pair(key, value):
    """`key` and `value` stacked on a new axis 1, as one concatenation (which
    XNNPACK takes, unlike LiteRT's `PACK`: see `halves`)."""
    return ops.concatenate(
        [ops.expand_dims(key, 1), ops.expand_dims(value, 1)], axis=1
    )


def cache_bytes(caches):
    """The bytes held by the tensors of `caches` (any nest of caches).

    Example:
    >>> cache_bytes(empty_cache((1, 2, 8, 3, 64), "float32"))
    12288
    >>> cache_bytes(empty_cache((1, 2, 8, 3, 64), "float32", "int8"))
    3264
    """
    if isinstance(caches, (tuple, list)) and not hasattr(caches, "shape"):
        return sum(cache_bytes(cache) for cache in caches)
    size = 1
    for dimension in caches.shape:
        size *= int(dimension)
    return size * ops.convert_to_numpy(ops.zeros((), caches.dtype)).itemsize

"""Choosing the next token from processed logits, with per-row tensor settings.

Hand-written rather than keras-hub's samplers: those take their settings as
Python constants (one compiled loop per temperature) and share one random
stream across the batch; here every setting is a (batch,) tensor and each
row draws from its own seed (keras-hub issue #2062 asks for the rest).

The warpers, in HF's order (`TemperatureLogitsWarper`, `TopKLogitsWarper`,
`TopPLogitsWarper`, `MinPLogitsWarper`):

    z = logits / temperature
    top_k: keep z >= the k-th largest z                 (k = 0: off)
    top_p: keep the most likely tokens until their probabilities reach p
           (a token is kept when the mass of the tokens above it is < p)
    min_p: keep tokens with p_j >= min_p * max_j p_j     (after the above)

then one token is drawn from softmax(z) over what is kept, by the Gumbel-max
trick with noise hashed from (row seed, position, token id): a row samples
the same tokens alone or in any batch. A row with temperature 0 is greedy:
the argmax of softmax(logits), exactly as `keras_hub.samplers.GreedySampler`.
"""

from keras import ops

from keras_tfm.generation.backend import bitcast_to_uint32, exclusive_cumsum
from keras_tfm.generation.logit_processors import NEG_INF


def _uint32(value):
    return ops.convert_to_tensor(value, "uint32")


def _mix(x):
    """A 32-bit integer hash (murmur3's finalizer) of uint32 `x` (uint32
    products wrap modulo 2**32 on every backend)."""
    x = ops.bitwise_xor(x, ops.right_shift(x, 16))
    x = ops.multiply(x, _uint32(0x85EBCA6B))
    x = ops.bitwise_xor(x, ops.right_shift(x, 13))
    x = ops.multiply(x, _uint32(0xC2B2AE35))
    return ops.bitwise_xor(x, ops.right_shift(x, 16))


def row_uniform(seed, position, vocabulary_size):
    """float32 (batch, V) uniform in (0, 1), a function of (seed, position, id).

    Example:
    >>> a = row_uniform(np.array([7, 8]), 3, 5)
    >>> b = row_uniform(np.array([8]), 3, 5)
    >>> bool(ops.all(a[1] == b[0])), bool(ops.all(a[0] != a[1]))
    (True, True)
    """
    seed = bitcast_to_uint32(ops.cast(seed, "int32"))[:, None]
    position = bitcast_to_uint32(ops.cast(position, "int32"))
    ids = bitcast_to_uint32(ops.arange(vocabulary_size, dtype="int32"))[None, :]
    key = ops.add(
        ops.multiply(seed, _uint32(0x9E3779B1)),
        _mix(ops.add(position, _uint32(0x68E31DA4))),
    )
    key = _mix(key)
    bits = _mix(ops.bitwise_xor(key, ops.multiply(ids, _uint32(0x27D4EB2F))))
    mantissa = ops.cast(ops.right_shift(bits, 8), "float32")  # 24 bits
    return (mantissa + 0.5) * (1.0 / (1 << 24))


def warp(logits, settings):
    """Temperature, top-k, top-p and min-p (module docstring), per row.

    Returns float32 (batch, V): the scaled logits, -inf where dropped. Rows
    with temperature 0 are scaled by 1 (they take the argmax anyway).
    """
    temperature = settings["temperature"]
    top_k, top_p = settings["top_k"], settings["top_p"]
    min_p = settings["min_p"]
    greedy = temperature <= 0.0
    scale = ops.where(greedy, 1.0, temperature)
    z = ops.cast(logits, "float32") / scale[:, None]
    vocabulary_size = z.shape[1]

    def cut(z):
        # One descending sort serves both cut-offs (a full top-k is one).
        ordered = ops.top_k(z, vocabulary_size)[0]
        rank = ops.arange(vocabulary_size, dtype="int32")[None, :]
        k = ops.where(top_k > 0, ops.minimum(top_k, vocabulary_size), vocabulary_size)
        ordered = ops.where(rank < k[:, None], ordered, NEG_INF)
        probabilities = ops.softmax(ordered, axis=-1)
        above = exclusive_cumsum(probabilities)
        keep = ops.logical_or(above < top_p[:, None], rank == 0)
        keep = ops.logical_and(keep, rank < k[:, None])
        threshold = ops.min(ops.where(keep, ordered, float("inf")), axis=-1)
        return ops.where(z >= threshold[:, None], z, NEG_INF)

    sampling = ops.logical_not(greedy)
    cuts_on = ops.any(sampling & ((top_k > 0) | (top_p < 1.0)))
    z = ops.cond(cuts_on, lambda: cut(z), lambda: z)

    def floor(z):
        probabilities = ops.softmax(z, axis=-1)
        largest = ops.max(probabilities, axis=-1, keepdims=True)
        return ops.where(probabilities >= min_p[:, None] * largest, z, NEG_INF)

    min_p_on = ops.any(sampling & (min_p > 0.0))
    return ops.cond(min_p_on, lambda: floor(z), lambda: z)


def next_tokens(logits, settings, position):
    """The next token per row: greedy, or sampled from the warped logits.

    Args:
        logits: float32 (batch, V), already processed (`process_logits`).
        settings: the dict of `settings_tensors`.
        position: scalar int32, the position decoded (the random stream's
            counter, with the row's seed).

    Returns:
        int32 (batch,).
    """
    logits = ops.cast(logits, "float32")
    greedy_tokens = ops.cast(ops.argmax(ops.softmax(logits, axis=-1), axis=-1), "int32")

    def sample():
        z = warp(logits, settings)
        uniform = row_uniform(settings["seed"], position, z.shape[1])
        gumbel = -ops.log(-ops.log(uniform))
        return ops.cast(ops.argmax(z + gumbel, axis=-1), "int32")

    greedy = settings["temperature"] <= 0.0
    sampled = ops.cond(ops.all(greedy), lambda: greedy_tokens, sample)
    return ops.where(greedy, greedy_tokens, sampled)

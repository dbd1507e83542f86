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

from keras_tfm._optional import tensorflow as tf
from keras_tfm.generation.logit_processors import NEG_INF


def _mix(x):
    """A 32-bit integer hash (murmur3's finalizer) of uint32 `x`."""
    x = tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, 16))
    x = x * tf.constant(0x85EBCA6B, "uint32")
    x = tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, 13))
    x = x * tf.constant(0xC2B2AE35, "uint32")
    return tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, 16))


def row_uniform(seed, position, vocabulary_size):
    """float32 (batch, V) uniform in (0, 1), a function of (seed, position, id).

    Example:
    >>> a = row_uniform(tf.constant([7, 8]), 3, 5)
    >>> b = row_uniform(tf.constant([8]), 3, 5)
    >>> bool(tf.reduce_all(a[1] == b[0])), bool(tf.reduce_all(a[0] != a[1]))
    (True, True)
    """
    seed = tf.bitcast(tf.cast(seed, "int32"), "uint32")[:, None]
    position = tf.bitcast(tf.cast(position, "int32"), "uint32")
    ids = tf.range(vocabulary_size, dtype="int32")
    ids = tf.bitcast(ids, "uint32")[None, :]
    key = _mix(seed * tf.constant(0x9E3779B1, "uint32") + _mix(position + 0x68E31DA4))
    bits = _mix(tf.bitwise.bitwise_xor(key, ids * tf.constant(0x27D4EB2F, "uint32")))
    mantissa = tf.cast(tf.bitwise.right_shift(bits, 8), "float32")  # 24 bits
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
    scale = tf.where(greedy, 1.0, temperature)
    z = tf.cast(logits, "float32") / scale[:, None]
    vocabulary_size = tf.shape(z)[1]

    def cut(z):
        # One descending sort serves both cut-offs.
        ordered = tf.sort(z, axis=-1, direction="DESCENDING")
        rank = tf.range(vocabulary_size)[None, :]
        k = tf.where(top_k > 0, tf.minimum(top_k, vocabulary_size), vocabulary_size)
        ordered = tf.where(rank < k[:, None], ordered, NEG_INF)
        probabilities = tf.nn.softmax(ordered, axis=-1)
        above = tf.cumsum(probabilities, axis=-1, exclusive=True)
        keep = tf.logical_or(above < top_p[:, None], rank == 0)
        keep = tf.logical_and(keep, rank < k[:, None])
        threshold = tf.reduce_min(tf.where(keep, ordered, float("inf")), axis=-1)
        return tf.where(z >= threshold[:, None], z, NEG_INF)

    sampling = tf.logical_not(greedy)
    cuts_on = tf.reduce_any(sampling & ((top_k > 0) | (top_p < 1.0)))
    z = tf.cond(cuts_on, lambda: cut(z), lambda: z)

    def floor(z):
        probabilities = tf.nn.softmax(z, axis=-1)
        largest = tf.reduce_max(probabilities, axis=-1, keepdims=True)
        return tf.where(probabilities >= min_p[:, None] * largest, z, NEG_INF)

    min_p_on = tf.reduce_any(sampling & (min_p > 0.0))
    return tf.cond(min_p_on, lambda: floor(z), lambda: z)


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
    logits = tf.cast(logits, "float32")
    greedy_tokens = tf.argmax(
        tf.nn.softmax(logits, axis=-1), axis=-1, output_type="int32"
    )

    def sample():
        z = warp(logits, settings)
        uniform = row_uniform(settings["seed"], position, tf.shape(z)[1])
        gumbel = -tf.math.log(-tf.math.log(uniform))
        return tf.argmax(z + gumbel, axis=-1, output_type="int32")

    greedy = settings["temperature"] <= 0.0
    sampled = tf.cond(tf.reduce_all(greedy), lambda: greedy_tokens, sample)
    return tf.where(greedy, greedy_tokens, sampled)

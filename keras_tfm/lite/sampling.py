"""`keras_tfm.generation.sampling.next_tokens` in NumPy, for the LiteRT chat.

The same warpers (temperature, top-k, top-p, min-p), the same random stream
hashed from (row seed, position, token id) and the same Gumbel-max draw, so
that a LiteRT chat samples the tokens the TensorFlow path samples for the
same seed (tests/lite/test_sampling.py holds the two equal). Written again
rather than imported because the LiteRT chat runs without Keras: the
original is written in `keras.ops`.

Example:
>>> from keras_tfm.generation.generation_config import (
...     GenerationConfig, settings_tensors)
>>> settings = settings_tensors([GenerationConfig(sampler="top_p", seed=3)])
>>> logits = np.log(np.array([[0.7, 0.2, 0.1]], "float32"))
>>> next_tokens(logits, settings, 5).tolist()  # top_p 0.1: the likeliest
[0]
"""

import numpy as np

SAMPLERS = ("random", "top_k", "top_p")
"""The samplers drawn here (greedy is the argmax of the logits)."""

_MASK = 0xFFFFFFFF


def draws(config):
    """Whether the LiteRT chat decodes `config` (a `GenerationConfig`) as
    the engine does: greedy or a sampler here, and no logit processor."""
    return config.sampler in ("greedy", *SAMPLERS) and not config.uses_processors


def _mix(x):
    """murmur3's finalizer on uint64 arrays holding uint32 values."""
    x = x ^ (x >> 16)
    x = (x * 0x85EBCA6B) & _MASK
    x = x ^ (x >> 13)
    x = (x * 0xC2B2AE35) & _MASK
    return x ^ (x >> 16)


def row_uniform(seed, position, vocabulary_size):
    """float32 (batch, V) uniform in (0, 1): `sampling.row_uniform`."""
    seed = np.asarray(seed, "int32").view("uint32").astype("uint64")[:, None]
    position = np.asarray(position, "int32").view("uint32").astype("uint64")
    ids = np.arange(vocabulary_size, dtype="uint64")[None, :]
    key = _mix(((seed * 0x9E3779B1) + _mix((position + 0x68E31DA4) & _MASK)) & _MASK)
    bits = _mix(key ^ ((ids * 0x27D4EB2F) & _MASK))
    mantissa = (bits >> 8).astype("float32")  # 24 bits
    return (mantissa + np.float32(0.5)) * np.float32(1.0 / (1 << 24))


def _softmax(z):
    with np.errstate(invalid="ignore", over="ignore"):
        e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def warp(logits, settings):
    """float32 (batch, V): `sampling.warp` (scaled logits, -inf where dropped)."""
    temperature = settings["temperature"]
    top_k, top_p, min_p = settings["top_k"], settings["top_p"], settings["min_p"]
    greedy = temperature <= 0.0
    z = logits.astype("float32") / np.where(greedy, 1.0, temperature)[:, None]
    z = z.astype("float32")
    size = z.shape[1]
    sampling = ~greedy
    if np.any(sampling & ((top_k > 0) | (top_p < 1.0))):
        ordered = -np.sort(-z, axis=-1)
        rank = np.arange(size)[None, :]
        k = np.where(top_k > 0, np.minimum(top_k, size), size)[:, None]
        ordered = np.where(rank < k, ordered, -np.inf).astype("float32")
        probabilities = _softmax(ordered)
        above = np.cumsum(probabilities, axis=-1) - probabilities
        keep = ((above < top_p[:, None]) | (rank == 0)) & (rank < k)
        threshold = np.where(keep, ordered, np.inf).min(axis=-1)
        z = np.where(z >= threshold[:, None], z, -np.inf).astype("float32")
    if np.any(sampling & (min_p > 0.0)):
        probabilities = _softmax(z)
        largest = probabilities.max(axis=-1, keepdims=True)
        z = np.where(probabilities >= min_p[:, None] * largest, z, -np.inf)
    return z.astype("float32")


def next_tokens(logits, settings, position):
    """int32 (batch,): the greedy or sampled next token per row, as
    `sampling.next_tokens` takes it from float32 `logits` (batch, V),
    `settings_tensors`' dict and the position decoded."""
    logits = np.asarray(logits, "float32")
    greedy_tokens = np.argmax(logits, axis=-1).astype("int32")
    greedy = settings["temperature"] <= 0.0
    if np.all(greedy):
        return greedy_tokens
    z = warp(logits, settings)
    uniform = row_uniform(settings["seed"], position, z.shape[1])
    gumbel = -np.log(-np.log(uniform))
    with np.errstate(invalid="ignore"):
        sampled = np.argmax(z + gumbel, axis=-1).astype("int32")
    return np.where(greedy, greedy_tokens, sampled)

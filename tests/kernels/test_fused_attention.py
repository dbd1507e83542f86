"""`fused_attention`: `keras.ops.dot_product_attention` under keras-tfm's contract.

These run on the suite's backend (TensorFlow), whose `ops.dot_product_attention`
computes the same function as JAX's; tests/test_without_tensorflow.py runs the
routing on JAX.
"""

import math

import keras
import numpy as np
import pytest
from keras import ops

from keras_tfm.kernels.fused_attention import (
    can_fuse,
    fused_dot_product_attention,
    key_padding_bias,
)

B, T, N, K, H = 3, 6, 4, 2, 8


def _inputs(seed=0):
    rng = np.random.default_rng(seed)
    query = rng.normal(size=(B, T, N, H)).astype("float32")
    key = rng.normal(size=(B, T, K, H)).astype("float32")
    value = rng.normal(size=(B, T, K, H)).astype("float32")
    key_mask = np.ones((B, T), bool)
    key_mask[1, T - 2 :] = False  # right padding
    key_mask[2, :2] = False  # left padding: causal queries 0 and 1 see nothing
    return query, key, value, key_mask


def _reference(query, key, value, key_mask, causal, scale):
    """float64 attention; a query with no visible key gets a zero output."""
    keep = np.broadcast_to(key_mask[:, None, :], (B, T, T))
    if causal:
        keep = keep & np.tril(np.ones((T, T), bool))[None]
    k = np.repeat(key.astype("float64"), N // K, axis=2)
    v = np.repeat(value.astype("float64"), N // K, axis=2)
    logits = np.einsum("bthd,bshd->bhts", query.astype("float64"), k) * scale
    logits = np.where(keep[:, None], logits, -np.inf)
    peak = np.max(logits, -1, keepdims=True)
    peak = np.where(np.isfinite(peak), peak, 0.0)
    weights = np.where(keep[:, None], np.exp(logits - peak), 0.0)
    total = weights.sum(-1, keepdims=True)
    weights = np.divide(weights, total, out=np.zeros_like(weights), where=total > 0)
    return np.einsum("bhts,bshd->bthd", weights, v)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("masked", [False, True])
def test_matches_a_float64_reference(causal, masked):
    query, key, value, key_mask = _inputs()
    scale = 1 / math.sqrt(H)
    outputs = fused_dot_product_attention(
        query, key, value, key_mask if masked else None, causal, scale
    )
    expected = _reference(
        query, key, value, key_mask if masked else np.ones_like(key_mask), causal,
        scale,
    )  # fmt: skip
    np.testing.assert_allclose(ops.convert_to_numpy(outputs), expected, atol=2e-6)
    if masked and causal:  # the left-padded row's first two queries: zeros
        assert not np.any(ops.convert_to_numpy(outputs)[2, :2])


def test_padding_does_not_change_the_real_tokens_outputs():
    query, key, value, key_mask = _inputs(seed=1)
    first = fused_dot_product_attention(query, key, value, key_mask, True)
    rng = np.random.default_rng(2)
    # Perturb only what is masked: the padded keys and values.
    noise = rng.normal(size=key.shape).astype("float32") * 100
    hidden = ~key_mask[:, :, None, None]
    second = fused_dot_product_attention(
        query, key + noise * hidden, value + noise * hidden, key_mask, True
    )
    np.testing.assert_allclose(
        ops.convert_to_numpy(first), ops.convert_to_numpy(second), atol=1e-5
    )


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_bias_is_finite_and_gradients_are_too(dtype):
    bias = ops.convert_to_numpy(ops.cast(key_padding_bias([[True, False]], dtype),
                                         "float32"))  # fmt: skip
    assert np.isfinite(bias).all() and bias[0, 0, 0, 1] < -1e4
    query, key, value, key_mask = (keras.ops.convert_to_tensor(a) for a in _inputs())
    query, key, value = (ops.cast(a, dtype) for a in (query, key, value))
    import tensorflow as tf

    with tf.GradientTape() as tape:
        tape.watch([query, key, value])
        loss = ops.sum(
            ops.cast(fused_dot_product_attention(query, key, value, key_mask, True),
                     "float32")  # fmt: skip
        )
    for gradient in tape.gradient(loss, [query, key, value]):
        assert np.isfinite(ops.convert_to_numpy(ops.cast(gradient, "float32"))).all()


def test_can_fuse_only_what_it_computes_exactly():
    q = np.zeros((1, 4, 2, 8), "float32")
    k = np.zeros((1, 4, 2, 8), "float32")
    longer = np.zeros((1, 6, 2, 8), "float32")
    assert can_fuse(q, k, None, None, False)
    assert can_fuse(q, k, None, 0, False)
    assert not can_fuse(q, k, None, 0, True)  # scores or dropout need weights
    assert not can_fuse(q, k, np.ones((1, 4, 4), bool), None, False)
    assert not can_fuse(q, longer, None, 0, False)  # causal, unaligned
    assert not can_fuse(q, k, None, 2, False)  # a cache index
    assert not can_fuse(q, k, None, ops.convert_to_tensor(0), False)
    assert not can_fuse(q, k, None, False, False)

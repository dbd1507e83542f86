"""`dot_product_attention`: one function, its kernel choice and its contract."""

import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_tfm.kernels.attention import dot_product_attention

B, T, S, N, K, H = 2, 14, 14, 4, 2, 8


def _inputs(q_len=T, k_len=S, seed=0):
    rng = np.random.default_rng(seed)
    query = rng.normal(size=(B, q_len, N, H)).astype("float32")
    key = rng.normal(size=(B, k_len, K, H)).astype("float32")
    value = rng.normal(size=(B, k_len, K, H)).astype("float32")
    key_mask = np.ones((B, k_len), bool)
    key_mask[1, k_len - 4 :] = False
    general = rng.random((B, q_len, k_len)) > 0.2
    return query, key, value, key_mask, general


def _reference(query, key, value, key_mask, general, causal_start, scale):
    """float64 NumPy attention with the three masks ANDed; masked rows -> 0."""
    q_len, k_len = query.shape[1], key.shape[1]
    keep = key_mask[:, None, :] & general
    causal = np.arange(q_len)[:, None] + causal_start >= np.arange(k_len)[None, :]
    keep = keep & causal[None]
    k = np.repeat(key.astype("float64"), N // K, axis=2)
    v = np.repeat(value.astype("float64"), N // K, axis=2)
    logits = np.einsum("bthd,bshd->bhts", query.astype("float64"), k) * scale
    logits = np.where(keep[:, None], logits, -np.inf)
    peak = np.max(logits, -1, keepdims=True)
    peak = np.where(np.isfinite(peak), peak, 0.0)
    weights = np.where(keep[:, None], np.exp(logits - peak), 0.0)
    total = weights.sum(-1, keepdims=True)
    weights = np.divide(weights, total, out=np.zeros_like(weights), where=total > 0)
    return np.einsum("bhts,bshd->bthd", weights, v), weights


@pytest.mark.parametrize("return_scores", [False, True])
@pytest.mark.parametrize("causal_start", [0, 2])
def test_both_kernels_match_a_float64_reference(
    small_tiles, return_scores, causal_start
):
    query, key, value, key_mask, general = _inputs()
    scale = 1 / math.sqrt(H)
    outputs, scores = dot_product_attention(
        query, key, value, key_mask=key_mask, mask=general,
        causal_start=causal_start, scale=scale, return_scores=return_scores,
    )  # fmt: skip
    expected, weights = _reference(
        query, key, value, key_mask, general, causal_start, scale
    )
    np.testing.assert_allclose(np.asarray(outputs), expected, atol=2e-6)
    # Scores come from the plain kernel only; otherwise the keys are long.
    assert len(small_tiles) == (0 if return_scores else 1)
    if return_scores:
        np.testing.assert_allclose(np.asarray(scores), weights, atol=2e-6)
    else:
        assert scores is None


def test_short_keys_a_single_query_and_dropout_take_the_plain_kernel(small_tiles):
    query, key, value, _, _ = _inputs()
    dot_product_attention(query[:, :11], key[:, :11], value[:, :11])  # short
    dot_product_attention(query[:, :1], key, value, causal_start=13)  # one query
    dropout = keras.layers.Dropout(0.5)
    outputs, _ = dot_product_attention(
        query, key, value, dropout_layer=dropout, training=True
    )
    assert small_tiles == []
    # Not training: the dropout layer is idle and the keys long, so tiled.
    dot_product_attention(query, key, value, dropout_layer=dropout, training=False)
    assert len(small_tiles) == 1


@pytest.mark.parametrize("length", [14, 9])
def test_unknown_key_length_chooses_when_the_graph_runs(small_tiles, length):
    query, key, value, key_mask, _ = _inputs()
    spec = [tf.TensorSpec([B, None, n, H]) for n in (N, K, K)]

    @tf.function(input_signature=spec + [tf.TensorSpec([B, None], tf.bool)])
    def run(q, k, v, mask):
        return dot_product_attention(q, k, v, key_mask=mask, causal_start=0)[0]

    sliced = [t[:, :length] for t in (query, key, value, key_mask)]
    expected, _ = _reference(
        *sliced[:4], np.ones((B, length, length), bool), 0, 1.0
    )
    np.testing.assert_allclose(run(*sliced).numpy(), expected, atol=2e-6)
    assert small_tiles[-1]["plain_below"] == 12

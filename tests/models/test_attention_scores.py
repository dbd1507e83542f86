"""Attention weights of the decoder families: shapes, masks, distributions."""

import numpy as np
import pytest

from keras_tfm.layers import AttentionCache
from tests.builders import causal_lm, seq2seq_lm


def check_distributions(scores, allowed):
    """Rows sum to 1 over `allowed` keys (if any) and are 0 elsewhere."""
    scores = np.asarray(scores, "float64")
    allowed = np.broadcast_to(allowed[:, None], scores.shape)  # over heads
    np.testing.assert_array_equal(scores[~allowed], 0.0)
    expected = allowed.any(axis=-1).astype("float64")
    np.testing.assert_allclose(scores.sum(axis=-1), expected, atol=1e-5)
    assert (scores[allowed] > 0).all()


@pytest.mark.parametrize("position_encoding", ["learned", "rotary"])
def test_causal_lm_self_attention_is_causal_and_skips_padding(position_encoding):
    model = causal_lm(
        vocabulary_size=20, num_layers=2, num_heads=2, hidden_dim=16,
        intermediate_dim=32, max_sequence_length=8,
        position_encoding=position_encoding,
    )  # fmt: skip
    token_ids = np.array([[5, 6, 0, 7, 8], [9, 3, 4, 0, 0]])
    logits, scores = model(token_ids, return_attention_scores=True)
    np.testing.assert_allclose(logits, model(token_ids), atol=1e-6)
    assert isinstance(scores, tuple) and len(scores) == 2
    real = token_ids != 0
    causal = np.tril(np.ones((5, 5), bool))
    allowed = causal[None] & real[:, None, :]  # (batch, query, key)
    for layer_scores in scores:
        assert tuple(layer_scores.shape) == (2, 2, 5, 5)
        check_distributions(layer_scores, allowed)


def test_seq2seq_returns_encoder_decoder_and_cross_attention():
    model = seq2seq_lm(
        vocabulary_size=20, num_encoder_layers=1, num_decoder_layers=2,
        num_heads=2, hidden_dim=16, intermediate_dim=32, max_sequence_length=8,
    )  # fmt: skip
    source = np.array([[3, 4, 5, 6], [7, 8, 0, 0]])
    target = np.array([[1, 9, 10], [1, 11, 12]])
    inputs = {"source_ids": source, "target_ids": target}
    logits, scores = model(inputs, return_attention_scores=True)
    np.testing.assert_allclose(logits, model(inputs), atol=1e-6)
    assert sorted(scores) == [
        "cross_attention",
        "decoder_self_attention",
        "encoder_self_attention",
    ]
    real = source != 0
    (encoder,) = scores["encoder_self_attention"]
    assert tuple(encoder.shape) == (2, 2, 4, 4)
    check_distributions(encoder, np.broadcast_to(real[:, None, :], (2, 4, 4)))
    assert len(scores["decoder_self_attention"]) == 2
    for self_scores, cross in zip(
        scores["decoder_self_attention"], scores["cross_attention"], strict=True
    ):
        assert tuple(self_scores.shape) == (2, 2, 3, 3)
        check_distributions(self_scores, np.tril(np.ones((2, 3, 3), bool)))
        assert tuple(cross.shape) == (2, 2, 3, 4)
        check_distributions(cross, np.broadcast_to(real[:, None, :], (2, 3, 4)))


def test_causal_lm_scores_match_a_numpy_softmax_of_the_first_layer():
    """Layer 1's weights from the weights by hand: softmax(QK^T / sqrt(d))."""
    model = causal_lm(
        vocabulary_size=20, num_layers=1, num_heads=2, hidden_dim=8,
        intermediate_dim=16, max_sequence_length=8, padding_id=None,
    )  # fmt: skip
    token_ids = np.array([[4, 2, 7]])
    _, (scores,) = model(token_ids, return_attention_scores=True)
    x = np.asarray(model.backbone.token_embedding.embeddings, "float64")[token_ids[0]]
    x = x + np.asarray(model.backbone.position_embedding.embeddings, "float64")[:3]
    norm = model.backbone.transformer_layers[0].self_attention_norm
    x = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
    x = x * np.asarray(norm.gamma) + np.asarray(norm.beta)
    attention = model.backbone.transformer_layers[0].self_attention
    q = x @ np.asarray(attention.query_dense.kernel) + np.asarray(
        attention.query_dense.bias
    )
    kv = x @ np.asarray(attention.key_value_dense.kernel) + np.asarray(
        attention.key_value_dense.bias
    )
    q = q.reshape(3, 2, 4)
    k = kv.reshape(3, 2, 2, 4)[:, 0]
    logits = np.einsum("qhd,khd->hqk", q, k) / 2.0
    logits = np.where(np.tril(np.ones((3, 3), bool)), logits, -np.inf)
    expected = np.exp(logits - logits.max(-1, keepdims=True))
    expected /= expected.sum(-1, keepdims=True)
    np.testing.assert_allclose(np.asarray(scores)[0], expected, atol=1e-5)


def test_no_scores_with_a_cache():
    model = causal_lm(
        vocabulary_size=20, num_layers=1, num_heads=2, hidden_dim=8,
        intermediate_dim=16, max_sequence_length=8,
    )  # fmt: skip
    block = model.backbone.transformer_layers[0]
    cache = block.empty_cache(1, 4)
    with pytest.raises(ValueError, match="not supported with a `cache`"):
        block(np.ones((1, 1, 8), "float32"), cache=AttentionCache(cache, 0),
              return_attention_scores=True)  # fmt: skip

import keras
import numpy as np
import pytest

from keras_tfm.training import Perplexity, TokenCrossEntropy

rng = np.random.default_rng(0)
LOGITS = rng.normal(size=(2, 4, 6)).astype("float32")
LABELS = np.array([[1, 2, 3, 0], [4, 5, 0, 0]])


def test_is_exp_of_the_padding_free_cross_entropy():
    perplexity = Perplexity(from_logits=True, mask_token_id=0)
    value = float(perplexity(LABELS, LOGITS))
    loss = float(TokenCrossEntropy()(LABELS, LOGITS))
    assert value == pytest.approx(np.exp(loss), rel=1e-5)
    changed = LOGITS.copy()
    changed[LABELS == 0] += 50.0
    perplexity.reset_state()
    assert float(perplexity(LABELS, changed)) == pytest.approx(value, rel=1e-5)


def test_accumulates_token_weighted_over_batches():
    perplexity = Perplexity(from_logits=True, mask_token_id=0)
    perplexity.update_state(LABELS[:1], LOGITS[:1])
    perplexity.update_state(LABELS[1:], LOGITS[1:])
    loss = float(TokenCrossEntropy()(LABELS, LOGITS))
    assert float(perplexity.result()) == pytest.approx(np.exp(loss), rel=1e-5)


def test_uniform_prediction_has_vocabulary_size_perplexity():
    perplexity = Perplexity(from_logits=True, mask_token_id=0)
    assert float(perplexity(LABELS, np.zeros_like(LOGITS))) == pytest.approx(6.0)


def test_under_mixed_precision():
    keras.config.set_dtype_policy("mixed_float16")
    perplexity = Perplexity(from_logits=True, mask_token_id=0)
    value = perplexity(LABELS, LOGITS.astype("float16"))
    assert keras.backend.standardize_dtype(value.dtype) == "float32"
    assert np.isfinite(float(value))

import math

import keras
import numpy as np
import pytest

from keras_tfm.layers import TokenEmbedding
from tests.layers.layer_harness import run_layer_test


def test_lookup_scaling_and_tied_reverse_projection():
    layer = TokenEmbedding(20, 8, scale_embeddings=True)
    ids = np.array([[3, 7, 0]])
    table = None
    out = np.asarray(layer(ids))
    table = np.asarray(layer.embeddings)
    np.testing.assert_allclose(out, table[ids] * math.sqrt(8), atol=1e-6)
    hidden = np.random.default_rng(0).normal(size=(1, 3, 8)).astype("float32")
    logits = layer(hidden, reverse=True)
    assert logits.dtype == "float32"
    np.testing.assert_allclose(np.asarray(logits), hidden @ table.T, atol=1e-5)


def test_mask_zero_survives_scaling():
    layer = TokenEmbedding(20, 8, scale_embeddings=True, mask_zero=True)
    out = layer(np.array([[3, 0]]))
    np.testing.assert_array_equal(np.asarray(out._keras_mask), [[True, False]])


def test_reverse_logits_are_float32_under_mixed_precision():
    keras.config.set_dtype_policy("mixed_float16")
    layer = TokenEmbedding(20, 8)
    hidden = layer(np.array([[1, 2]]))
    assert hidden.dtype == "float16"
    assert layer(hidden, reverse=True).dtype == "float32"


def test_layer_contract(tmp_path):
    run_layer_test(
        lambda: TokenEmbedding(30, 8, mask_zero=True, scale_embeddings=True),
        {"inputs": np.array([[1, 5, 9, 0], [2, 0, 0, 0]], "int32")},
        expected_output_shape=(2, 4, 8),
        tmp_path=tmp_path,
    )


def test_bad_input():
    with pytest.raises(ValueError, match="vocabulary_size=0"):
        TokenEmbedding(0, 8)
    layer = TokenEmbedding(10, 8)
    with pytest.raises(ValueError, match="inputs.dtype=float32"):
        layer(np.zeros((1, 3), "float32"))
    with pytest.raises(ValueError, match=r"inputs.shape=\(1, 3, 5\)"):
        layer(np.zeros((1, 3, 5), "float32"), reverse=True)


@pytest.mark.parametrize("bad_id", [-1, 10, 99])
def test_ids_outside_the_vocabulary_are_refused(bad_id):
    layer = TokenEmbedding(10, 4)
    with pytest.raises(ValueError, match=f"Received: token id {bad_id} "):
        layer(np.array([[1, bad_id, 2]]))

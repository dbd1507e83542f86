import numpy as np
import pytest

from keras_tfm.layers import LearnedPositionalEmbedding
from tests.layers.layer_harness import run_layer_test


def test_adds_the_row_of_each_position():
    layer = LearnedPositionalEmbedding(max_sequence_length=10)
    x = np.random.default_rng(0).normal(size=(2, 6, 4)).astype("float32")
    out = np.asarray(layer(x))
    table = np.asarray(layer.embeddings)
    np.testing.assert_allclose(out, x + table[:6], atol=1e-6)
    step = np.asarray(layer(x[:, 2:3], start_index=7))
    np.testing.assert_allclose(step, x[:, 2:3] + table[7], atol=1e-6)


def test_a_sequence_longer_than_the_table_is_refused():
    layer = LearnedPositionalEmbedding(max_sequence_length=4)
    with pytest.raises(ValueError, match="max_sequence_length`=4.*length 5"):
        layer(np.zeros((1, 5, 8), "float32"))
    layer(np.zeros((1, 2, 8), "float32"), start_index=2)  # exactly fits
    with pytest.raises(ValueError, match="start_index=3"):
        layer(np.zeros((1, 2, 8), "float32"), start_index=3)


@pytest.mark.parametrize("value", [0, -3, 2.5, None])
def test_bad_max_sequence_length(value):
    with pytest.raises(ValueError, match=f"max_sequence_length={value!r}"):
        LearnedPositionalEmbedding(max_sequence_length=value)


def test_layer_contract(tmp_path):
    x = np.random.default_rng(0).normal(size=(2, 5, 8)).astype("float32")
    run_layer_test(
        lambda: LearnedPositionalEmbedding(max_sequence_length=8),
        {"inputs": x},
        expected_output_shape=(2, 5, 8),
        tmp_path=tmp_path,
    )

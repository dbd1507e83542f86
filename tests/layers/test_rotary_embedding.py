import numpy as np
import pytest

from keras_tfm.layers import RotaryEmbedding
from tests.layers import numpy_reference as ref
from tests.layers.layer_harness import run_layer_test


def test_matches_the_rotation_formula():
    x = np.random.default_rng(0).normal(size=(2, 12, 3, 8)).astype("float32")
    np.testing.assert_allclose(
        np.asarray(RotaryEmbedding()(x)), ref.rotary(x), atol=1e-5, rtol=0
    )
    np.testing.assert_allclose(
        np.asarray(RotaryEmbedding()(x, start_index=5)),
        ref.rotary(x, start=5),
        atol=1e-5,
        rtol=0,
    )


def test_scores_depend_only_on_relative_position():
    rng = np.random.default_rng(1)
    q, k = rng.normal(size=(1, 1, 1, 16)), rng.normal(size=(1, 1, 1, 16))
    rope = RotaryEmbedding()

    def score(q_pos, k_pos):
        rq = np.asarray(rope(q.astype("float32"), start_index=q_pos))
        rk = np.asarray(rope(k.astype("float32"), start_index=k_pos))
        return float((rq * rk).sum())

    assert score(5, 2) == pytest.approx(score(13, 10), abs=1e-4)
    assert score(5, 2) != pytest.approx(score(5, 4), abs=1e-3)


def test_odd_head_dim_is_refused():
    with pytest.raises(ValueError, match="even head dimension"):
        RotaryEmbedding()(np.zeros((1, 2, 1, 5), "float32"))


def test_layer_contract(tmp_path):
    x = np.random.default_rng(0).normal(size=(2, 5, 2, 4)).astype("float32")
    run_layer_test(
        RotaryEmbedding,
        {"inputs": x},
        expected_output_shape=(2, 5, 2, 4),
        tmp_path=tmp_path,
    )

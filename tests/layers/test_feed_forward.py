import numpy as np
import pytest

from keras_tfm.layers import FeedForward
from tests.layers.block_reference import feed_forward_fn
from tests.layers.layer_harness import randomize_weights, run_layer_test


@pytest.mark.parametrize(
    "activation",
    ["relu", "gelu", "gelu_approximate", "silu", "swiglu", "geglu_approximate"],
)
def test_matches_reference(activation):
    layer = FeedForward(intermediate_dim=12, activation=activation)
    x = np.random.default_rng(0).normal(size=(2, 5, 8)).astype("float32")
    layer(x)
    randomize_weights(layer)
    np.testing.assert_allclose(
        np.asarray(layer(x)), feed_forward_fn(layer)(x), atol=1e-5, rtol=0
    )


def test_swiglu_fuses_gate_and_up_projections():
    layer = FeedForward(intermediate_dim=12, activation="swiglu")
    layer(np.zeros((1, 2, 8), "float32"))
    assert layer.intermediate_dense.kernel.shape == (8, 24)
    assert layer.output_dense.kernel.shape == (12, 8)


@pytest.mark.parametrize("activation", ["relu", "swiglu"])
def test_layer_contract(activation, tmp_path):
    x = np.random.default_rng(0).normal(size=(2, 5, 8)).astype("float32")
    run_layer_test(
        lambda: FeedForward(intermediate_dim=16, activation=activation),
        {"inputs": x},
        expected_output_shape=(2, 5, 8),
        tmp_path=tmp_path,
    )


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"intermediate_dim": 0}, "intermediate_dim=0"),
        ({"intermediate_dim": 8, "activation": "tanh"}, "activation='tanh'"),
    ],
)
def test_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        FeedForward(**kwargs)

import keras
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


@pytest.mark.parametrize(
    "activation, inner_dropout", [("relu", 0.0), ("swiglu", 0.0), ("relu", 0.2)]
)
def test_layer_contract(activation, inner_dropout, tmp_path):
    x = np.random.default_rng(0).normal(size=(2, 5, 8)).astype("float32")
    run_layer_test(
        lambda: FeedForward(
            intermediate_dim=16, activation=activation, inner_dropout=inner_dropout
        ),
        {"inputs": x},
        expected_output_shape=(2, 5, 8),
        tmp_path=tmp_path,
    )


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"intermediate_dim": 0}, "intermediate_dim=0"),
        ({"intermediate_dim": 8, "activation": "tanh"}, "activation='tanh'"),
        ({"intermediate_dim": 8, "inner_dropout": 1.0}, "inner_dropout=1.0"),
        ({"intermediate_dim": 8, "inner_dropout": -0.1}, "inner_dropout=-0.1"),
    ],
)
def test_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        FeedForward(**kwargs)


def _dropout_mask(layer, shape):
    """The mask (scale included) the layer's next inner dropout will draw:
    `keras.random.dropout` of ones with a copy of its seed generator's state."""
    generator = keras.random.SeedGenerator(0)
    generator.state.assign(layer.inner_dropout_layer.seed_generator.state.value)
    return np.asarray(
        keras.random.dropout(
            np.ones(shape, "float32"), layer.inner_dropout, seed=generator
        ),
        np.float64,
    )


def _seeded_layer(activation, inner_dropout, x, seed=0):
    keras.utils.set_random_seed(seed)
    layer = FeedForward(
        intermediate_dim=12, activation=activation, inner_dropout=inner_dropout
    )
    layer(x)
    randomize_weights(layer, seed=seed)
    return layer


@pytest.mark.parametrize("activation", ["relu", "geglu_approximate"])
def test_inner_dropout_matches_reference_with_the_same_mask(activation):
    # T5: FFN(x) = Dropout(act(x W1 + b1)) W2 + b2, in training only.
    x = np.random.default_rng(1).normal(size=(2, 5, 8)).astype("float32")
    layer = _seeded_layer(activation, 0.5, x)
    np.testing.assert_allclose(
        np.asarray(layer(x, training=False)), feed_forward_fn(layer)(x),
        atol=1e-5, rtol=0,
    )  # fmt: skip
    mask = _dropout_mask(layer, (2, 5, 12))
    assert 0 < np.count_nonzero(mask) < mask.size  # some dropped, some kept
    np.testing.assert_allclose(mask[mask != 0], 2.0)  # kept ones scaled 1/(1-0.5)
    trained = np.asarray(layer(x, training=True))
    np.testing.assert_allclose(
        trained, feed_forward_fn(layer, inner_mask=mask)(x), atol=1e-5, rtol=0
    )
    assert not np.allclose(trained, feed_forward_fn(layer)(x), atol=1e-3)


@pytest.mark.parametrize("length", [5, 1024])  # 1024: the chunked path's length
def test_inner_dropout_near_one_leaves_the_output_bias(length):
    x = np.random.default_rng(2).normal(size=(1, length, 8)).astype("float32")
    layer = _seeded_layer("relu", 1 - 1e-7, x)
    bias = np.broadcast_to(np.asarray(layer.output_dense.bias), x.shape)
    # Every inner activation dropped: only the output projection's bias is left.
    np.testing.assert_array_equal(np.asarray(layer(x, training=True)), bias)
    np.testing.assert_allclose(
        np.asarray(layer(x, training=False)), feed_forward_fn(layer)(x),
        atol=1e-5, rtol=0,
    )  # fmt: skip


def test_inner_dropout_config_round_trip():
    layer = FeedForward(intermediate_dim=12, inner_dropout=0.3)
    config = layer.get_config()
    assert config["inner_dropout"] == 0.3
    assert FeedForward.from_config(config).inner_dropout == 0.3
    # Off by default: no dropout sublayer, the layer as it always was.
    plain = FeedForward(intermediate_dim=12)
    assert plain.get_config()["inner_dropout"] == 0.0
    assert plain.inner_dropout_layer is None

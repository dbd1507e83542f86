import doctest

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_tfm.kernels import chunked_feed_forward as chunked_module
from keras_tfm.kernels.chunked_feed_forward import (
    CHUNKED_FEED_FORWARD_MIN_LENGTH,
    chunked_feed_forward,
)
from keras_tfm.layers import FeedForward
from keras_tfm.layers import feed_forward as feed_forward_module


def _outputs_and_gradients(fn, x, weights):
    with tf.GradientTape() as tape:
        tape.watch(x)
        out = fn(x)
        # A non-linear loss, so the upstream gradient differs per element.
        loss = tf.reduce_sum(tf.sin(3.0 * tf.cast(out, "float32")) * out)
    grads = tape.gradient(loss, [x] + weights)
    return [np.asarray(out, "float32")] + [np.asarray(g, "float32") for g in grads]


def _chunked(ffn, chunk_size):
    def fn(x):
        return chunked_feed_forward(
            x,
            ffn.intermediate_dense.kernel,
            ffn._bias(ffn.intermediate_dense),
            ffn.output_dense.kernel,
            ffn._bias(ffn.output_dense),
            activation=ffn.activation,
            chunk_size=chunk_size,
        )

    return fn


@pytest.mark.parametrize(
    "activation",
    ["relu", "gelu", "gelu_approximate", "silu", "swiglu", "geglu_approximate"],
)
@pytest.mark.parametrize(
    "shape, chunk_size",
    [((2, 9, 8), 4), ((1, 16, 8), 16), ((3, 5, 8), 64), ((2, 7, 8), 1)],
    ids=["ragged", "one-chunk", "chunk-longer", "one-token-chunks"],
)
@pytest.mark.parametrize("use_bias", [True, False])
def test_equals_the_plain_network_with_gradients(
    activation, shape, chunk_size, use_bias
):
    keras.utils.set_random_seed(0)
    ffn = FeedForward(24, activation=activation, use_bias=use_bias,
                      bias_initializer="random_normal")  # fmt: skip
    x = tf.constant(np.random.default_rng(1).normal(size=shape).astype("float32"))
    ffn(x)
    plain = _outputs_and_gradients(ffn, x, ffn.trainable_weights)
    chunked = _outputs_and_gradients(
        _chunked(ffn, chunk_size), x, ffn.trainable_weights
    )
    for actual, expected in zip(chunked, plain, strict=True):
        np.testing.assert_allclose(actual, expected, atol=2e-5, rtol=2e-5)


def test_under_xla_and_bfloat16_as_close_to_float32_as_the_plain_path():
    keras.utils.set_random_seed(0)
    ffn = FeedForward(32, activation="gelu", dtype="mixed_bfloat16")
    reference = FeedForward(32, activation="gelu")
    x32 = np.random.default_rng(2).normal(size=(2, 13, 8)).astype("float32")
    ffn(x32), reference(x32)
    reference.set_weights(ffn.get_weights())
    x = tf.constant(x32, "bfloat16")

    @tf.function(jit_compile=True)
    def both(x):
        return (
            _outputs_and_gradients_graph(ffn, x, ffn.trainable_weights),
            _outputs_and_gradients_graph(_chunked(ffn, 5), x, ffn.trainable_weights),
        )

    plain, chunked = both(x)
    exact = _outputs_and_gradients(
        reference, tf.cast(x, "float32"), reference.trainable_weights
    )
    for p, c, e in zip(plain, chunked, exact, strict=True):
        assert p.dtype == c.dtype
        plain_error = np.abs(np.asarray(p, "float32") - e).max()
        chunked_error = np.abs(np.asarray(c, "float32") - e).max()
        assert chunked_error <= 1.5 * plain_error + 1e-3 * np.abs(e).max()


def _outputs_and_gradients_graph(fn, x, weights):
    with tf.GradientTape() as tape:
        tape.watch(x)
        out = fn(x)
        out = tf.cast(out, "float32")
        loss = tf.reduce_sum(tf.sin(3.0 * out) * out)
    return [out] + tape.gradient(loss, [x] + weights)


def test_layer_switches_to_the_chunked_path_for_long_inputs(monkeypatch):
    calls = []

    def spy(*args, **kwargs):
        calls.append(args[0].shape)
        return chunked_feed_forward(*args, **kwargs)

    monkeypatch.setattr(feed_forward_module, "chunked_feed_forward", spy)
    keras.utils.set_random_seed(0)
    ffn = FeedForward(16)
    ffn(np.ones((1, 4, 8), "float32"))
    assert calls == []  # short: the plain path
    long_x = (
        np.random.default_rng(0)
        .normal(size=(1, CHUNKED_FEED_FORWARD_MIN_LENGTH + 3, 8))
        .astype("float32")
    )
    chunked = _outputs_and_gradients(ffn, tf.constant(long_x), ffn.trainable_weights)
    assert len(calls) == 1
    monkeypatch.setattr(feed_forward_module, "CHUNKED_FEED_FORWARD_MIN_LENGTH", 10**9)
    plain = _outputs_and_gradients(ffn, tf.constant(long_x), ffn.trainable_weights)
    assert len(calls) == 1
    for actual, expected in zip(chunked, plain, strict=True):
        np.testing.assert_allclose(actual, expected, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("activation", ["relu", "gelu", "swiglu"])
@pytest.mark.parametrize("jit_compile", [False, True])
def test_unknown_length_chooses_when_run(monkeypatch, activation, jit_compile):
    """One trace with a `None` length: chunked at 13 tokens, plain at 6,
    both equal to the plain layer, gradients included."""
    monkeypatch.setattr(feed_forward_module, "CHUNKED_FEED_FORWARD_MIN_LENGTH", 10)
    calls = []

    def spy(*args, **kwargs):
        calls.append(kwargs["plain_below"])
        return chunked_feed_forward(*args, chunk_size=4, **kwargs)

    monkeypatch.setattr(feed_forward_module, "chunked_feed_forward", spy)
    keras.utils.set_random_seed(0)
    ffn = FeedForward(16, activation=activation)
    x = tf.constant(np.random.default_rng(1).normal(size=(2, 13, 8)), "float32")
    ffn(x[:, :4])
    weights = ffn.trainable_weights
    run = tf.function(
        lambda x: _outputs_and_gradients_graph(ffn, x, weights),
        input_signature=[tf.TensorSpec([2, None, 8])],
        jit_compile=jit_compile,
    )
    for length in (13, 6):
        actual = [t.numpy() for t in run(x[:, :length])]
        monkeypatch.setattr(
            feed_forward_module, "CHUNKED_FEED_FORWARD_MIN_LENGTH", 10**9
        )
        expected = _outputs_and_gradients(ffn, x[:, :length], weights)
        monkeypatch.setattr(feed_forward_module, "CHUNKED_FEED_FORWARD_MIN_LENGTH", 10)
        for a, e in zip(actual, expected, strict=True):
            # XLA sums in another order: float32 rounding of sums of ~10.
            np.testing.assert_allclose(a, e, atol=1e-4, rtol=1e-4)
    assert calls == [10]  # traced once, the switch inside


@pytest.mark.parametrize("bad", [0, -1, 2.5, True])
def test_bad_plain_below(bad):
    x, w1, w2 = np.ones((1, 3, 4)), np.ones((4, 8)), np.ones((8, 4))
    with pytest.raises(ValueError, match="plain_below"):
        chunked_feed_forward(x, w1, np.zeros(8), w2, np.zeros(4), plain_below=bad)


def test_lora_factors_get_gradients_through_the_chunked_path(monkeypatch):
    monkeypatch.setattr(feed_forward_module, "CHUNKED_FEED_FORWARD_MIN_LENGTH", 4)
    keras.utils.set_random_seed(0)
    ffn = FeedForward(16)
    x = tf.constant(np.random.default_rng(0).normal(size=(2, 6, 8)), "float32")
    ffn(x)
    ffn.intermediate_dense.enable_lora(2)
    ffn.output_dense.enable_lora(2)
    for dense in (ffn.intermediate_dense, ffn.output_dense):
        # LoRA's B starts at zero, which would leave A without a gradient.
        dense.lora_kernel_b.assign(np.full(dense.lora_kernel_b.shape, 0.1))
    chunked = _outputs_and_gradients(ffn, x, ffn.trainable_weights)
    monkeypatch.setattr(feed_forward_module, "CHUNKED_FEED_FORWARD_MIN_LENGTH", 10**9)
    plain = _outputs_and_gradients(ffn, x, ffn.trainable_weights)
    assert len(ffn.trainable_weights) == 6  # 2 LoRA factors per Dense, 2 biases
    for actual, expected in zip(chunked, plain, strict=True):
        assert np.any(expected != 0)
        np.testing.assert_allclose(actual, expected, atol=1e-5, rtol=1e-5)


def test_quantized_layer_keeps_the_plain_path(monkeypatch):
    ffn = FeedForward(16)
    ffn(np.ones((1, 6, 8), "float32"))
    ffn.intermediate_dense.quantize("int8")
    ffn.output_dense.quantize("int8")
    calls = []
    monkeypatch.setattr(
        feed_forward_module, "chunked_feed_forward", lambda *a, **k: calls.append(1)
    )
    monkeypatch.setattr(feed_forward_module, "CHUNKED_FEED_FORWARD_MIN_LENGTH", 4)
    assert ffn(np.ones((1, 6, 8), "float32")).shape == (1, 6, 8)
    assert calls == []


@pytest.mark.parametrize("chunk_size", [0, -1, 2.5, True])
def test_bad_chunk_size(chunk_size):
    x, w1, w2 = np.ones((1, 3, 4)), np.ones((4, 8)), np.ones((8, 4))
    with pytest.raises(ValueError, match="chunk_size"):
        chunked_feed_forward(x, w1, np.zeros(8), w2, np.zeros(4), chunk_size=chunk_size)


def test_docstring_example_runs():
    result = doctest.testmod(chunked_module, extraglobs={"np": np})
    assert result.attempted > 0 and result.failed == 0

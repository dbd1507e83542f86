"""Each activation of the table: its two forward forms agree, and its
derivative (what the chunked feed-forward's backward pass uses) matches a
float64 central difference of the activation's definition."""

import math

import numpy as np
import pytest
from scipy.special import erf

from keras_tfm.kernels.activations import (
    ACTIVATION_FUNCTIONS,
    ACTIVATIONS,
    GATED_ACTIVATIONS,
)


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


# The definitions, in float64, written from the formulas (not from the code).
DEFINITIONS = {
    "relu": lambda x: np.maximum(x, 0.0),
    "gelu": lambda x: x * 0.5 * (1 + erf(x / math.sqrt(2))),
    "gelu_approximate": lambda x: 0.5 * x * (
        1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))
    ),
    "silu": lambda x: x * _sigmoid(x),
    "swiglu": lambda x: (
        lambda gate, up: gate * _sigmoid(gate) * up
    )(*np.split(x, 2, axis=-1)),
    # T5 v1.1's "gated-gelu": the tanh GELU of the gate times the up half.
    "geglu_approximate": lambda x: (
        lambda gate, up: 0.5 * gate * (
            1 + np.tanh(math.sqrt(2 / math.pi) * (gate + 0.044715 * gate**3))
        ) * up
    )(*np.split(x, 2, axis=-1)),
}


def test_the_table_is_the_list_the_layers_check():
    assert set(DEFINITIONS) == set(ACTIVATIONS)
    assert set(GATED_ACTIVATIONS) <= set(ACTIVATIONS)


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_forward_forms_and_derivative(name):
    rng = np.random.default_rng(0)
    # Away from relu's kink, where the central difference is undefined.
    hidden = rng.uniform(-4, 4, size=(3, 8))
    hidden = np.where(np.abs(hidden) < 0.05, 0.5, hidden)
    upstream = rng.normal(size=(3, 4 if name in GATED_ACTIVATIONS else 8))
    activation = ACTIVATION_FUNCTIONS[name]
    x32 = hidden.astype("float32")
    value, derivative = activation.with_derivative(x32)
    expected = DEFINITIONS[name](hidden)
    np.testing.assert_allclose(np.asarray(value), expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(
        np.asarray(activation.apply(x32)), expected, rtol=1e-5, atol=1e-6
    )
    # d(upstream . f(x)) / dx by central differences, one input at a time.
    eps = 1e-6
    numeric = np.zeros_like(hidden)
    for index in np.ndindex(hidden.shape):
        step = np.zeros_like(hidden)
        step[index] = eps
        numeric[index] = np.sum(
            upstream * (DEFINITIONS[name](hidden + step)
                        - DEFINITIONS[name](hidden - step))
        ) / (2 * eps)  # fmt: skip
    actual = np.asarray(derivative(upstream.astype("float32")))
    np.testing.assert_allclose(actual, numeric, rtol=1e-4, atol=1e-5)

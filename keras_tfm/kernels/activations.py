"""The feed-forward activations, each written once: forward and derivative.

Each entry of `ACTIVATION_FUNCTIONS` holds what `FeedForward` runs
(`apply`, Keras's op in the layer's dtype) and what the chunked feed-forward
runs (`with_derivative`: the value computed in float32 and a function that
maps the gradient of the output to the gradient of the input, which the
chunked backward pass needs because it recomputes the hidden activations).
Adding an activation is adding an entry here; `ACTIVATIONS` (the names the
layers and models accept) is read from this table.

    relu:             max(0, h)
    gelu:             h Phi(h), Phi the normal CDF (exact, erf; BERT)
    gelu_approximate: 0.5 h (1 + tanh(sqrt(2 / pi) (h + 0.044715 h^3)))
                      (GPT-2, HuggingFace's "gelu_new")
    silu:             h sigmoid(h) (swish; Marian)
    swiglu:           silu(gate) * up, the hidden split in two halves
                      (gate first; PaLM, LLaMA)
    geglu_approximate: gelu_approximate(gate) * up, split as swiglu
                      (T5 v1.1 and FLAN-T5's "gated-gelu")

Example:
>>> hidden = np.array([[-1.0, 0.5]], "float32")
>>> value, derivative = ACTIVATION_FUNCTIONS["relu"].with_derivative(hidden)
>>> np.asarray(derivative(np.ones((1, 2), "float32"))).tolist()
[[0.0, 1.0]]
"""

import collections
import math

from keras import ops

Activation = collections.namedtuple("Activation", ["apply", "with_derivative"])
"""`apply(hidden)` -> activated; `with_derivative(hidden)` -> `(activated,
derivative)` with `derivative(d_activated)` -> d_hidden. What only the
derivative needs is computed when it is called, so the forward pass (which
never calls it) does not pay for it without XLA."""


def _relu(hidden):
    def derivative(d_out):
        return ops.where(hidden > 0, d_out, 0.0)

    return ops.relu(hidden), derivative


def _float32_slope(hidden, activated, slope):
    """`(activated, derivative)` for an elementwise activation computed in
    float32: `slope()` is d activated / d hidden, in float32."""

    def derivative(d_out):
        return ops.cast(ops.cast(d_out, "float32") * slope(), hidden.dtype)

    return ops.cast(activated, hidden.dtype), derivative


def _gelu(hidden):
    h = ops.cast(hidden, "float32")
    cdf = 0.5 * (1.0 + ops.erf(h / math.sqrt(2.0)))

    def slope():
        pdf = ops.exp(-0.5 * h * h) / math.sqrt(2.0 * math.pi)
        return cdf + h * pdf  # d/dh of h * cdf(h)

    return _float32_slope(hidden, h * cdf, slope)


def _gelu_approximate(hidden):
    h = ops.cast(hidden, "float32")
    c = math.sqrt(2.0 / math.pi)
    t = ops.tanh(c * (h + 0.044715 * h * h * h))

    def slope():
        # d/dh of 0.5 h (1 + t), t = tanh(c (h + 0.044715 h^3)).
        dt = (1.0 - t * t) * c * (1.0 + 3 * 0.044715 * h * h)
        return 0.5 * (1.0 + t) + 0.5 * h * dt

    return _float32_slope(hidden, 0.5 * h * (1.0 + t), slope)


def _silu(hidden):
    h = ops.cast(hidden, "float32")
    sigmoid = ops.sigmoid(h)

    def slope():
        return sigmoid * (1.0 + h * (1.0 - sigmoid))  # d/dh of h sigmoid(h)

    return _float32_slope(hidden, h * sigmoid, slope)


def _swiglu_apply(hidden):
    gate, up = ops.split(hidden, 2, axis=-1)
    return ops.silu(gate) * up


def _swiglu(hidden):
    gate, up = ops.split(hidden, 2, axis=-1)
    g = ops.cast(gate, "float32")
    sigmoid = ops.sigmoid(g)
    silu = g * sigmoid

    def derivative(d_out):
        d_out = ops.cast(d_out, "float32")
        d_gate = d_out * ops.cast(up, "float32") * sigmoid * (1.0 + g * (1.0 - sigmoid))
        d_up = d_out * silu
        return ops.cast(ops.concatenate([d_gate, d_up], axis=-1), hidden.dtype)

    return ops.cast(silu, hidden.dtype) * up, derivative


def _gated(activation):
    """The `Activation` of `activation(gate) * up`, the hidden split in two
    halves (gate first), from `activation`'s own value and derivative."""

    def apply(hidden):
        gate, up = ops.split(hidden, 2, axis=-1)
        return activation.apply(gate) * up

    def with_derivative(hidden):
        gate, up = ops.split(hidden, 2, axis=-1)
        activated, d_activated = activation.with_derivative(gate)

        def derivative(d_out):
            d_gate = d_activated(d_out * up)
            return ops.concatenate([d_gate, d_out * activated], axis=-1)

        return activated * up, derivative

    return Activation(apply, with_derivative)


ACTIVATION_FUNCTIONS = {
    "relu": Activation(ops.relu, _relu),
    "gelu": Activation(lambda h: ops.gelu(h, approximate=False), _gelu),
    "gelu_approximate": Activation(
        lambda h: ops.gelu(h, approximate=True), _gelu_approximate
    ),
    "silu": Activation(ops.silu, _silu),
    "swiglu": Activation(_swiglu_apply, _swiglu),
}
ACTIVATION_FUNCTIONS["geglu_approximate"] = _gated(
    ACTIVATION_FUNCTIONS["gelu_approximate"]
)
ACTIVATIONS = tuple(ACTIVATION_FUNCTIONS)
"""The activation names `FeedForward` and the models accept."""

GATED_ACTIVATIONS = ("swiglu", "geglu_approximate")
"""Activations whose input is twice the inner width (gate, then up)."""

import keras
from keras import ops

from keras_tfm.kernels import plain_scope
from keras_tfm.kernels.activations import ACTIVATION_FUNCTIONS, GATED_ACTIVATIONS
from keras_tfm.kernels.chunked_feed_forward import (
    CHUNKED_FEED_FORWARD_MIN_LENGTH,
    chunked_feed_forward,
)
from keras_tfm.kernels.rotated_inputs import rotated_output
from keras_tfm.layers.hyperparameters import (
    config_of,
    store_checked,
    store_initializers,
)
from keras_tfm.quantized_weights import projection

# The constructor arguments besides the initializers, in `get_config` order.
FEED_FORWARD_ARGUMENTS = ("intermediate_dim", "activation", "use_bias", "inner_dropout")


@keras.saving.register_keras_serializable(package="keras_tfm")
class FeedForward(keras.layers.Layer):
    """The position-wise feed-forward network of a Transformer block.

        relu:   FFN(x) = max(0, x W1 + b1) W2 + b2          (the paper)
        gelu:   FFN(x) = GELU(x W1 + b1) W2 + b2            (BERT)
        gelu_approximate: GELU's tanh approximation         (GPT-2)
        silu:   FFN(x) = SiLU(x W1 + b1) W2 + b2            (Marian's swish)
        swiglu: FFN(x) = (SiLU(x W_gate) * (x W1)) W2       (PaLM, LLaMA)
        geglu_approximate: (GELU~(x W_gate) * (x W1)) W2   (T5 v1.1)

    "gelu" is the exact (erf) form; "gelu_approximate" is
    0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))), HuggingFace's "gelu_new";
    "silu" is x sigmoid(x), also called swish.
    The output has the input's last dimension. With `inner_dropout`, the
    activations are dropped out between the two projections in training,
    FFN(x) = Dropout(act(x W1 + b1)) W2 + b2 (T5's feed-forward).
    On TensorFlow, sequences of `CHUNKED_FEED_FORWARD_MIN_LENGTH` (1024)
    tokens or more run
    through `chunked_feed_forward` (same numbers; the backward pass
    recomputes the hidden activations a chunk at a time instead of keeping
    them), unless the layer is quantized or drops out its inner activations
    (`inner_dropout` in training); when the length is unknown at
    trace time (a `tf.function` with a `None` length) the choice is made
    when the graph runs, except inside `kernels.plain_scope.plain_kernels()`
    (a forward-only graph: plain).

    Args:
        intermediate_dim: the inner width (2048 in the paper's base model).
        activation: "relu", "gelu", "gelu_approximate", "silu", "swiglu" or
            "geglu_approximate" (GELU~ is "gelu_approximate").
        use_bias: whether the projections have biases.
        inner_dropout: the dropout rate of the inner activations, in
            training only (default 0: none, no sublayer).
        kernel_initializer, bias_initializer: initializers of the projections.

    Call arguments:
        inputs: (..., hidden_dim).
        training: whether `inner_dropout` is active.

    Returns:
        A tensor of the input's shape.

    Example:
    >>> ffn = keras_tfm.layers.FeedForward(intermediate_dim=32)
    >>> ffn(np.ones((2, 3, 8), "float32")).shape
    TensorShape([2, 3, 8])
    """

    def __init__(
        self,
        intermediate_dim,
        activation="relu",
        use_bias=True,
        inner_dropout=0.0,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        **kwargs,
    ):
        super().__init__(**kwargs)
        store_checked(self, locals(), FEED_FORWARD_ARGUMENTS)
        store_initializers(self, locals())
        self.supports_masking = True
        self.inner_dropout_layer = None
        if self.inner_dropout:
            self.inner_dropout_layer = keras.layers.Dropout(
                self.inner_dropout, dtype=self.dtype_policy, name="inner_dropout"
            )

    def build(self, inputs_shape):
        hidden_dim = inputs_shape[-1]
        inner_shape = (*inputs_shape[:-1], self.intermediate_dim)
        # A gated activation's gate and up projections are fused into one matmul.
        width = 2 if self.activation in GATED_ACTIVATIONS else 1
        self.intermediate_dense = projection(
            self, width * self.intermediate_dim, "intermediate"
        )
        self.intermediate_dense.build(inputs_shape)
        self.output_dense = projection(self, hidden_dim, "output")
        self.output_dense.build(inner_shape)

    def call(self, inputs, training=None):
        dropping = self.inner_dropout_layer is not None and bool(training)
        # `chunked_feed_forward` has no dropout: in training with one, plain.
        chunked, plain_below = (False, None) if dropping else self._chunked_path(inputs)
        if chunked:
            return chunked_feed_forward(
                inputs,
                self.intermediate_dense.kernel,
                self._bias(self.intermediate_dense),
                self.output_dense.kernel,
                self._bias(self.output_dense),
                activation=self.activation,
                plain_below=plain_below,
            )
        hidden = self.intermediate_dense(inputs)
        hidden = ACTIVATION_FUNCTIONS[self.activation].apply(hidden)
        if dropping:
            hidden = self.inner_dropout_layer(hidden, training=True)
        rotated = rotated_output(self.output_dense, hidden)  # a LiteRT step's
        return self.output_dense(hidden) if rotated is None else rotated

    def _chunked_path(self, inputs):
        """`(chunked, plain_below)`: a known length decides now, an unknown
        one when the graph runs (`plain_below` for `chunked_feed_forward`)."""
        if (
            len(inputs.shape) < 3
            # On JAX the chunk loop serialises small matmuls and recomputes
            # them; XLA plans the activations' memory itself there.
            or keras.backend.backend() != "tensorflow"
            or self.intermediate_dense.quantization_mode is not None
            or self.output_dense.quantization_mode is not None
        ):
            return False, None
        length = inputs.shape[-2]
        if length is None:  # plain in a forward-only graph (`plain_scope`)
            if plain_scope.active():
                return False, None
            return True, CHUNKED_FEED_FORWARD_MIN_LENGTH
        return length >= CHUNKED_FEED_FORWARD_MIN_LENGTH, None

    def _bias(self, dense):
        if dense.use_bias:
            return dense.bias
        return ops.zeros((dense.units,), self.compute_dtype)

    def compute_output_shape(self, inputs_shape):
        return inputs_shape

    def get_config(self):
        config = super().get_config()
        config.update(config_of(self, FEED_FORWARD_ARGUMENTS))
        return config

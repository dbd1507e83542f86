"""How keras-tfm stores quantized and cast weights: the format, in one place.

Keras's `quantize("int8")` stores each weight matrix as int8 with one float
scale per output channel and quantizes every matmul's inputs at run time;
`int8_weight_only_config()` keeps the int8 weights and float activations
(`INT8_WEIGHT_ONLY`). `cast_weights("bfloat16")` stores the matrices in
bfloat16 (`CAST_WEIGHT_DTYPES`). In both weight-only forms `QuantizableDense`
(and `TokenEmbedding`'s tied logits) hold the matrix output-major and
multiply with `keras_tfm.kernels.weight_only_matmul`. `get_config` records
the mode as `saved_mode` names it; loading redoes it from
`keras_mode_and_config`. Which layers of a model take a mode, and the
model-level `quantize`, are `keras_tfm.models.quantization`'s.

Example:
>>> saved_mode("int8", int8_weight_only_config())
'int8_weight_only'
>>> keras_mode_and_config("int8")
('int8', None)
"""

import keras
import numpy as np
from keras import ops

from keras_tfm._keras_compat import replace_variable
from keras_tfm.kernels.weight_only_matmul import (
    BLOCK_SIZE,
    block_matmul,
    dequantize_blocks,
    weight_only_matmul,
)

CAST_WEIGHT_DTYPES = ("bfloat16",)
"""Dtypes `cast_weights` stores weight matrices in (activations stay float)."""

INT8_BLOCKS = "int8_blocks"
"""`quantize` mode: int8 values in blocks of 32, a scale and offset each.

What a GGUF file's block quantisations (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) hold,
kept as they are: `values * scale + offset` per block of 32 weights along a
row (`keras_tfm.kernels.dequantize_blocks`), 1 byte a weight plus 4 bytes
per block (float16 scale and offset), dequantised inside the XLA matmul
(`block_matmul`). From float weights (`model.quantize("int8_blocks")`) each
block is quantised symmetrically: scale max|w| / 127, offset 0
(`int8_blocks`), so a weight is off by at most max|block| / 254."""

BLOCK_MODES = (INT8_BLOCKS,)


def int8_blocks(weights):
    """Symmetric int8 blocks of an (out, in) float matrix (`in` a multiple of 32).

    Returns:
        `(values int8 (out, in), scale float16 (out, in / 32), offset)`, offset
        zero, such that `dequantize_blocks` gives the weights to within
        max|block| / 254 (plus float16's rounding of the scale).

    Example:
    >>> w = np.linspace(-1, 1, 64, dtype="float32").reshape(1, 64)
    >>> values, scale, offset = int8_blocks(w)
    >>> int(values[0, 0]), int(values[0, -1]), offset.tolist()
    (-127, 127, [[0.0, 0.0]])
    """
    weights = np.asarray(weights, "float32")
    out, width = weights.shape
    if width % BLOCK_SIZE:
        raise ValueError(
            f"int8 blocks need rows of a multiple of {BLOCK_SIZE} weights. "
            f"Received: a matrix of shape {weights.shape}"
        )
    blocks = weights.reshape(out, width // BLOCK_SIZE, BLOCK_SIZE)
    scale = (np.abs(blocks).max(-1) / 127).astype("float16")
    safe = np.where(scale == 0, 1, scale.astype("float32"))[..., None]
    values = np.clip(np.round(blocks / safe), -127, 127).astype("int8")
    return values.reshape(out, width), scale, np.zeros_like(scale)


# Keras's "int8" also quantizes every matmul's inputs per token at run time
# (AbsMaxQuantizer); TensorFlow has no fast int8 x int8 matmul on CPU, so that
# saves no time. Without an activation quantizer Keras's int8 layers compute
# `matmul(float inputs, int8 kernel) / scale`: XLA fuses the int8 -> float
# conversion into the matmul, so a decoding step reads 1 byte per weight.
INT8_WEIGHT_ONLY = "int8_weight_only"
"""`quantized_to` of a model quantized with `int8_weight_only_config()`."""


def int8_weight_only_config():
    """Keras's int8 config without activation quantization (weight-only int8).

    `model.quantize("int8", config=int8_weight_only_config())` stores each
    weight matrix as int8 with one float scale per output channel (per token
    row for the tied embedding, which is the output channel of the logits)
    and keeps the activations float: every matmul is
    `matmul(x, int8 kernel) / scale`, which under XLA reads the int8 bytes
    and converts them inside the matmul. Each weight is off by at most
    max|channel| / 254, so an output by at most
    sum_i |x_i| * max_i |w_ij| / 254.

    Example:
    >>> model = keras_tfm.models.CausalLM(keras_tfm.models.DecoderBackbone(
    ...     vocabulary_size=50, num_layers=1, num_heads=2, hidden_dim=16,
    ...     intermediate_dim=32, max_sequence_length=16))
    >>> model.quantize("int8", config=int8_weight_only_config())
    >>> model.quantized_to
    'int8_weight_only'
    """
    return keras.quantizers.Int8QuantizationConfig(activation_quantizer=None)


def is_weight_only_int8(mode, config):
    """Whether Keras's `quantize(mode, config=config)` is weight-only int8."""
    return (
        mode == "int8"
        and config is not None
        and config.activation_quantizer is None
        and config.weight_quantizer is None
    )


def saved_mode(mode, config):
    """The mode recorded in `get_config`; `keras_mode_and_config` undoes it."""
    return INT8_WEIGHT_ONLY if is_weight_only_int8(mode, config) else mode


def keras_mode_and_config(mode):
    """`(mode, config)` for Keras's `quantize`, from a `saved_mode`."""
    if mode == INT8_WEIGHT_ONLY:
        return "int8", int8_weight_only_config()
    return mode, None


def check_cast_dtype(dtype, layer=None, stored=False, weights="weights"):
    """Refuses a dtype `cast_weights` does not store, an unbuilt layer, or
    one whose `weights` are `stored` quantized or cast already."""
    if layer is not None and not layer.built:
        raise ValueError(
            f"Layer '{layer.name}' is not built: build it (or call it once) "
            "before casting its weights."
        )
    if dtype not in CAST_WEIGHT_DTYPES:
        raise ValueError(
            f"`dtype` must be one of {CAST_WEIGHT_DTYPES}. Received: dtype={dtype!r}"
        )
    if stored:
        raise ValueError(
            f"Layer '{layer.name}' is quantized already; cast the {weights} of "
            f"the float layer instead. Received: dtype={dtype!r}"
        )


@keras.saving.register_keras_serializable(package="keras_tfm")
class QuantizableDense(keras.layers.Dense):
    """Keras's `Dense`, whose weight-only int8 and bfloat16 forms decode fast.

    Float, int8 and int4 modes are Keras's own. Quantized with
    `config=keras_tfm.models.int8_weight_only_config()` (int8 weights,
    float activations), or with its weights cast to bfloat16
    (`cast_weights`), the kernel is held output-major, (units, input_dim), so
    that a one-row product reads it at memory speed under XLA
    (`weight_only_matmul`); `kernel` and saved files keep Keras's
    (input_dim, units) layout, so files load either way.

    Example:
    >>> dense = keras_tfm.layers.QuantizableDense(3)
    >>> dense.build((None, 4))
    >>> dense.quantize("int8", config=keras_tfm.models.int8_weight_only_config())
    >>> tuple(dense.kernel.shape)
    (4, 3)
    >>> dense(np.ones((1, 4), "float32")).shape
    TensorShape([1, 3])
    """

    @property
    def output_major(self):
        """True when the kernel is weight-only int8, int8 blocks or bfloat16,
        held (units, input_dim)."""
        return getattr(self, "_output_major", False)

    @property
    def block_weights(self):
        """True once the kernel is int8 blocks (`INT8_BLOCKS`)."""
        return getattr(self, "_block_weights", False)

    def quantize_to_blocks(self):
        """Stores the float kernel as symmetric int8 blocks (`int8_blocks`)."""
        self.hold_blocks(*int8_blocks(ops.convert_to_numpy(self._kernel).T))

    def hold_blocks(self, values, scale, offset):
        """Stores the kernel as int8 `values` (units, input_dim) in blocks of
        32 with `scale` and `offset` (units, input_dim / 32) each (see
        `INT8_BLOCKS`); a GGUF file's blocks are given as they are.

        Example:
        >>> dense = keras_tfm.layers.QuantizableDense(2, use_bias=False)
        >>> dense.build((None, 32))
        >>> dense.hold_blocks(np.ones((2, 32), "int8"),
        ...                   np.array([[1.0], [2.0]]), np.zeros((2, 1)))
        >>> dense(np.ones((1, 32), "float32")).numpy().tolist()
        [[32.0, 64.0]]
        """
        if self.quantization_mode is not None or self.output_major:
            raise ValueError(
                f"Layer '{self.name}' is quantized already; store blocks in the "
                "float layer instead."
            )
        if self.lora_enabled:
            raise ValueError(
                f"Layer '{self.name}' has LoRA enabled: merge the adapters into "
                "a float layer before storing int8 blocks."
            )
        units, width = self.units, self._kernel.shape[0]
        shapes = {
            "values": (np.shape(values), (units, width)),
            "scale": (np.shape(scale), (units, width // BLOCK_SIZE)),
            "offset": (np.shape(offset), (units, width // BLOCK_SIZE)),
        }
        for name, (got, want) in shapes.items():
            if tuple(got) != want:
                raise ValueError(
                    f"Layer '{self.name}' needs block {name} of shape {want}. "
                    f"Received: shape={tuple(got)}"
                )
        replace_variable(self, "_kernel", np.asarray(values, "int8"), name="kernel")
        for name, part in (("block_scale", scale), ("block_offset", offset)):
            replace_variable(self, name, np.asarray(part, "float16"), name=name)
        self._output_major = self._block_weights = True

    def cast_weights(self, dtype):
        """Stores the kernel in `dtype` ("bfloat16"), output-major; the inputs,
        bias and outputs keep their float dtype.

        Example:
        >>> dense = keras_tfm.layers.QuantizableDense(3)
        >>> dense.build((None, 4))
        >>> dense.cast_weights("bfloat16")
        >>> dense(np.ones((1, 4), "float32")).dtype
        tf.float32
        """
        stored = self.quantization_mode is not None or self.output_major
        check_cast_dtype(dtype, self, stored)
        self._hold_output_major(dtype)

    def quantize(self, mode=None, type_check=True, config=None):
        if self.output_major:
            raise ValueError(
                f"Layer '{self.name}' already holds {self._kernel.dtype} "
                f"weights; quantize the float layer instead. Received: mode={mode!r}"
            )
        # Keras refuses subclasses (`type_check`) in case they override `call`;
        # this one keeps Keras's `call` and quantizes Keras's way, then only
        # transposes the weight-only int8 kernel.
        super().quantize(mode, type_check=False, config=config)
        if mode == "int8" and self.inputs_quantizer is None and not self.lora_enabled:
            self._hold_output_major("int8")

    def _hold_output_major(self, dtype):
        if self.lora_enabled:
            raise ValueError(
                f"Layer '{self.name}' has LoRA enabled: merge the adapters into "
                f"a float layer before storing weights in {dtype}."
            )
        kernel = ops.convert_to_numpy(self._kernel).T.astype(dtype)
        replace_variable(self, "_kernel", kernel, name="kernel")
        self._output_major = True

    @property
    def kernel(self):
        if self.block_weights:
            weights = dequantize_blocks(
                self._kernel, self.block_scale, self.block_offset
            )
            return ops.transpose(weights)
        if self.output_major:
            return ops.transpose(self._kernel)
        return super().kernel

    def call(self, inputs, training=None):
        if not self.output_major:
            return super().call(inputs, training=training)
        return self._output_major_call(inputs)

    def _int8_call(self, inputs, training=None):
        if not self.output_major:
            return super()._int8_call(inputs, training=training)
        return self._output_major_call(inputs, self.kernel_scale)

    def _output_major_call(self, inputs, scale=None):
        if self.block_weights:
            outputs = block_matmul(
                inputs, self._kernel, self.block_scale, self.block_offset
            )
        else:
            outputs = weight_only_matmul(inputs, self._kernel, scale)
        if self.bias is not None:
            outputs = ops.add(outputs, self.bias)
        if self.activation is not None:
            outputs = self.activation(outputs)
        return outputs

    def enable_lora(self, rank, lora_alpha=None, a_initializer="he_uniform",
                    b_initializer="zeros"):  # fmt: skip
        if self.output_major:
            raise ValueError(
                f"Layer '{self.name}' holds weight-only {self._kernel.dtype} "
                "weights, which do not take LoRA adapters: enable LoRA on the "
                "float model, or quantize to Keras's 'int8' (with its "
                "activation quantizer)."
            )
        super().enable_lora(rank, lora_alpha, a_initializer, b_initializer)

    # Files keep Keras's (input_dim, units) kernel; variable "0" is the kernel.
    # Int8 blocks are saved as held: values, bias if any, scale, offset.
    def save_own_variables(self, store):
        if self.block_weights:
            for i, variable in enumerate(self._block_variables()):
                store[str(i)] = ops.convert_to_numpy(variable)
            return None
        own = {}
        super().save_own_variables(own)
        if self.output_major:
            own["0"] = np.transpose(ops.convert_to_numpy(self._kernel))
        elif self.lora_enabled and self.quantization_mode is None:
            # Keras saves W + (alpha/rank) A B and zeroes A and B on load: the
            # reloaded adapters could never train again (both zero), and the
            # merged sum rounds differently. Keep the three apart.
            own["0"] = ops.convert_to_numpy(self._kernel)
            own["lora_kernel_a"] = ops.convert_to_numpy(self.lora_kernel_a)
            own["lora_kernel_b"] = ops.convert_to_numpy(self.lora_kernel_b)
        for key, value in own.items():
            store[key] = value

    def _block_variables(self):
        bias = [] if self.bias is None else [self.bias]
        return [self._kernel, *bias, self.block_scale, self.block_offset]

    def load_own_variables(self, store):
        if self.block_weights:
            for i, variable in enumerate(self._block_variables()):
                variable.assign(store[str(i)])
            return None
        if not self.output_major:
            super().load_own_variables(store)
            if self.lora_enabled and "lora_kernel_a" in store:
                self.lora_kernel_a.assign(store["lora_kernel_a"])
                self.lora_kernel_b.assign(store["lora_kernel_b"])
            return None
        own = {key: store[key] for key in store.keys()}
        own["0"] = np.transpose(np.asarray(own["0"]))
        super().load_own_variables(own)


def projection(layer, units, name):
    """A `QuantizableDense` of `units` configured as `layer`'s projections are.

    It takes `layer`'s `use_bias`, `kernel_initializer`, `bias_initializer`
    and dtype policy, as every projection of `FeedForward` and
    `MultiHeadSelfAttention` does.

    Example:
    >>> ffn = keras_tfm.layers.FeedForward(8, use_bias=False)
    >>> projection(ffn, 4, "output").use_bias
    False
    """
    return QuantizableDense(
        units,
        use_bias=layer.use_bias,
        kernel_initializer=layer.kernel_initializer,
        bias_initializer=layer.bias_initializer,
        dtype=layer.dtype_policy,
        name=name,
    )

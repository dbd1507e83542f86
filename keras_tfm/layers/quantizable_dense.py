import keras
import numpy as np
from keras import ops

from keras_tfm._keras_compat import replace_variable
from keras_tfm.layers.weight_only_matmul import check_cast_dtype, weight_only_matmul


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
        """True when the kernel is weight-only int8 or bfloat16, held
        (units, input_dim)."""
        return getattr(self, "_output_major", False)

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
        check_cast_dtype(dtype, self)
        if self.quantization_mode is not None or self.output_major:
            raise ValueError(
                f"Layer '{self.name}' is quantized already; cast the weights of "
                f"the float layer instead. Received: dtype={dtype!r}"
            )
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
    def save_own_variables(self, store):
        if not self.output_major:
            return super().save_own_variables(store)
        own = {}
        super().save_own_variables(own)
        own["0"] = np.transpose(ops.convert_to_numpy(self._kernel))
        for key, value in own.items():
            store[key] = value

    def load_own_variables(self, store):
        if not self.output_major:
            return super().load_own_variables(store)
        own = {key: store[key] for key in store.keys()}
        own["0"] = np.transpose(np.asarray(own["0"]))
        super().load_own_variables(own)

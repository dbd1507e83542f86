"""Post-training weight quantization that survives `.keras` save and load.

Keras's `Model.quantize("int8")` swaps each Dense/Embedding layer's float
kernel for int8 values and a per-channel scale. Our models build their
sublayers in `__init__` from constructor arguments, so a reloaded model would
get float layers while the file holds int8 variables. `QuantizationMixin`
records the mode in `get_config` (`"quantization_mode"`) and `from_config`
quantizes the freshly built float model before the weights are loaded, so the
variable structure matches; LoRA adapters (`"lora"`, see
`keras_tfm.models.lora`) are re-enabled the same way. The storage format
itself (weight-only int8, bfloat16, `QuantizableDense`) is
`keras_tfm.quantized_weights`.
"""

import warnings

import keras

from keras_tfm._keras_compat import (
    flatten_layers,
    one_garbage_collection,
    should_quantize_layer,
)
from keras_tfm.generation.compiled_loops import invalidate_compiled_loops
from keras_tfm.layers.learned_positional_embedding import LearnedPositionalEmbedding
from keras_tfm.layers.relative_position_bias import RelativePositionBias
from keras_tfm.layers.token_embedding import TokenEmbedding
from keras_tfm.quantized_weights import (
    BLOCK_MODES,
    CAST_WEIGHT_DTYPES,
    INT8_BLOCKS,
    QuantizableDense,
    check_cast_dtype,
    int8_weight_only_config,  # noqa: F401 (keras_tfm.models exports it)
    keras_mode_and_config,
    saved_mode,
)

QUANTIZATION_MODES = ("int8", "int4")

# Keras's own quantizable layers refuse subclasses (their `type_check`), so
# these are matched by exact type; a layer defining its own `quantize`
# (e.g. `TokenEmbedding`) counts as supporting it.
_KERAS_QUANTIZABLE = (
    keras.layers.Dense,
    keras.layers.EinsumDense,
    keras.layers.Embedding,
    keras.layers.ReversibleEmbedding,
)
# Tables that are added to the hidden states (or, T5's bias, to the attention
# logits), not multiplied with them: they hold no matmul kernel and stay
# float (they are small).
_NOT_MATMUL = (LearnedPositionalEmbedding, RelativePositionBias)


# Keras has no weight-only bfloat16 or int8-block mode: our two matmul layers
# implement them.
_CASTABLE = (QuantizableDense, TokenEmbedding)


def _supports_quantize(layer, mode):
    if mode in CAST_WEIGHT_DTYPES + BLOCK_MODES:
        return isinstance(layer, _CASTABLE)
    if type(layer) in _KERAS_QUANTIZABLE:
        return True
    for klass in type(layer).__mro__:
        if "quantize" in vars(klass):
            return klass not in (keras.layers.Layer,) + _KERAS_QUANTIZABLE
    return False


def _leaf_layers(model):
    return [
        layer
        for layer in flatten_layers(model, include_self=False)
        if len(flatten_layers(layer)) == 1
    ]


def _is_quantized(layer):
    return (
        layer.quantization_mode is not None
        or getattr(layer, "output_major", getattr(layer, "bfloat16_weights", False))
        or getattr(layer, "block_weights", False)
    )


def check_quantizable(model, mode):
    """Raises a ValueError naming the first layer that cannot take `mode`.

    `mode` is a quantization mode or a `cast_weights` dtype. A model whose
    weights were cast takes no other mode, nor a quantized model a cast. A
    leaf layer holding a weight of rank >= 2 (a kernel or an embedding table)
    must implement the mode (Keras's `quantize`; bfloat16: `QuantizableDense`
    and `TokenEmbedding`); weightless and normalization layers are skipped,
    as Keras skips them.
    """
    if mode not in QUANTIZATION_MODES + CAST_WEIGHT_DTYPES + BLOCK_MODES:
        raise ValueError(
            f"`mode` must be one of {QUANTIZATION_MODES}. Received: mode={mode!r}"
        )
    done = getattr(model, "quantized_to", None)
    ours = CAST_WEIGHT_DTYPES + BLOCK_MODES
    if done is not None and (mode in ours or done in ours):
        raise ValueError(
            f"{model.name} is quantized to {done!r} already; quantize the float "
            f"model instead. Received: mode={mode!r}"
        )
    for layer in _leaf_layers(model):
        if isinstance(layer, _NOT_MATMUL) or _is_quantized(layer):
            continue
        has_kernel = any(len(w.shape) >= 2 for w in layer.weights)
        if has_kernel and not _supports_quantize(layer, mode):
            raise ValueError(
                f"Cannot quantize {model.name} to {mode}: layer "
                f"'{layer.path}' ({type(layer).__name__}) holds a weight matrix "
                "but does not implement `quantize`. Received: "
                f"mode={mode!r}"
            )


class QuantizationMixin:
    """Makes a subclassed keras-tfm model's `quantize` survive saving.

    Put it before `keras.Model` in the bases; `get_config` must end with
    `return self._add_quantization_config(config)` and an overriding
    `from_config` with `return cls._from_quantized_config(config)`.

    Example:
    >>> model = keras_tfm.models.CausalLM(keras_tfm.models.DecoderBackbone(
    ...     vocabulary_size=50, num_layers=1, num_heads=2, hidden_dim=16,
    ...     intermediate_dim=32, max_sequence_length=16))
    >>> model.quantize("int8")
    >>> model.get_config()["quantization_mode"]
    'int8'

    """

    def quantize(self, mode=None, config=None, filters=None, **kwargs):
        """Quantizes every Dense/Embedding weight matrix (Keras's `quantize`).

        `mode` is one of `QUANTIZATION_MODES`: "int8" (weights and, at run
        time, each token's activations) or "int4". With
        `config=int8_weight_only_config()`, int8 weights with float
        activations (`quantized_to` is then "int8_weight_only"), what makes
        cached decoding faster on a CPU; `cast_weights("bfloat16")` is the
        same with bfloat16 weights.

        Raises a ValueError naming the layer when one holding a weight matrix
        cannot be quantized, before any layer is changed. Layers already
        quantized are left as they are.
        """
        check_quantizable(self, mode)

        def should_quantize(layer):
            # Only layers that quantize: Keras would also try weightless ones
            # (Dropout, norms, an attached tokenizer, which is not built).
            if _is_quantized(layer) or not _supports_quantize(layer, mode):
                return False
            return should_quantize_layer(layer, filters)

        with warnings.catch_warnings(), one_garbage_collection():
            # Dropout, norms, position tables: nothing to quantize, expected.
            warnings.filterwarnings(
                "ignore", message=".*does not have a `quantize` method implemented"
            )
            # Keras's quantizer calls np.array on a TF variable (numpy 2 noise).
            warnings.filterwarnings(
                "ignore", message="__array__ implementation doesn't accept a copy"
            )
            super().quantize(mode, config=config, filters=should_quantize, **kwargs)
        self._record_quantization(mode, config)

    def cast_weights(self, dtype="bfloat16", filters=None):
        """Stores every weight matrix in `dtype` ("bfloat16"); activations,
        norms and logits stay float32.

        Weight-only bfloat16: half the bytes of float32 with no scales, each
        weight rounded once (relative error <= 2^-9), every matmul computed in
        the activations' dtype, and the matrices held output-major, so that a
        one-row product under XLA reads 2 bytes a weight (batch-1 decoding
        is bound by those bytes on a CPU). `quantized_to` is then `dtype` and
        `.keras` files load back cast. Not Keras's `quantize`, whose modes
        are fixed; `filters` is as there.

        `dtype="int8_blocks"` (`keras_tfm.quantized_weights.INT8_BLOCKS`):
        int8 values in blocks of 32 with a float16 scale and offset each, 1.125
        bytes a weight, dequantised inside each XLA matmul; what a GGUF file's
        Q4_0/Q4_1/Q5/Q8_0 blocks are held as, unexpanded
        (`load_gguf_llama(..., weights="int8_blocks")`), and from float
        weights symmetric blocks (error <= max|block| / 254).

        Example:
        >>> model = keras_tfm.models.CausalLM(keras_tfm.models.DecoderBackbone(
        ...     vocabulary_size=50, num_layers=1, num_heads=2, hidden_dim=16,
        ...     intermediate_dim=32, max_sequence_length=16))
        >>> model.cast_weights("bfloat16")
        >>> model.quantized_to
        'bfloat16'
        >>> model(np.array([[1, 2, 3]])).dtype
        tf.float32
        """
        if dtype not in BLOCK_MODES:
            check_cast_dtype(dtype)
        check_quantizable(self, dtype)
        self._store_each(dtype, filters)

    def hold_blocks(self, blocks):
        """Stores given int8 blocks: `{layer path: (values, scale, offset)}`.

        For weights quantised already (a GGUF file's Q4/Q8 blocks,
        `keras_tfm.convert.gguf_blocks`): each named layer holds its blocks
        as given (`QuantizableDense.hold_blocks`), every other weight matrix
        is quantised to symmetric blocks; `quantized_to` is then
        "int8_blocks", as after `cast_weights("int8_blocks")`.
        """
        check_quantizable(self, INT8_BLOCKS)
        layers = {layer.path: layer for layer in _leaf_layers(self)}
        unknown = sorted(set(blocks) - set(layers))
        if unknown:
            raise ValueError(
                f"{self.name} has no layers {unknown[:4]} to hold blocks. "
                f"Received: blocks for {sorted(blocks)[:4]}..."
            )
        with one_garbage_collection():
            for path, parts in blocks.items():
                layers[path].hold_blocks(*parts)
        self._store_each(INT8_BLOCKS, None)

    def _store_each(self, mode, filters):
        """Our storage modes (bfloat16, int8 blocks), layer by layer."""
        with one_garbage_collection():
            for layer in _leaf_layers(self):
                if _is_quantized(layer) or not _supports_quantize(layer, mode):
                    continue
                if should_quantize_layer(layer, filters):
                    if mode in CAST_WEIGHT_DTYPES:
                        layer.cast_weights(mode)
                    else:
                        layer.quantize_to_blocks()
        self._record_quantization(mode, None)

    def _record_quantization(self, mode, config):
        for layer in flatten_layers(self):
            if isinstance(layer, QuantizationMixin):
                layer._quantization_mode = saved_mode(mode, config)
        # A traced decoding loop keeps reading the float variables.
        invalidate_compiled_loops(self)

    # Not `quantization_mode`: Keras reads that property of every layer to
    # route `__call__` to `quantized_call`, which a model does not have.
    @property
    def quantized_to(self):
        """The mode the model was quantized to ("int8", "int8_weight_only",
        "int4", "int8_blocks", "bfloat16") or None."""
        return getattr(self, "_quantization_mode", None)

    def _add_quantization_config(self, config):
        if self.quantized_to is not None:
            config["quantization_mode"] = self.quantized_to
        lora = getattr(self, "_lora_config", None)
        if lora is not None:
            config["lora"] = dict(lora)  # see `keras_tfm.models.lora`
        return config

    @classmethod
    def from_config(cls, config):
        return cls._from_quantized_config(config)

    @classmethod
    def _from_quantized_config(cls, config):
        config = dict(config)
        mode = config.pop("quantization_mode", None)
        lora = config.pop("lora", None)
        model = cls(**config)
        if mode in CAST_WEIGHT_DTYPES + BLOCK_MODES:
            model.cast_weights(mode)
        elif mode is not None:
            mode, quantization_config = keras_mode_and_config(mode)
            model.quantize(mode, config=quantization_config)
        if lora is not None:
            from keras_tfm.models.lora import enable_lora  # it imports this module

            enable_lora(model, **lora)
        return model

import math

import keras
import numpy as np
from keras import ops

from keras_tfm._keras_compat import get_keras_mask, replace_variable, set_keras_mask
from keras_tfm.kernels.weight_only_matmul import (
    BLOCK_SIZE,
    block_matmul,
    weight_only_matmul,
)
from keras_tfm.quantized_weights import check_cast_dtype, int8_blocks
from keras_tfm.validation import check_positive_int


@keras.saving.register_keras_serializable(package="keras_tfm")
class TokenEmbedding(keras.layers.ReversibleEmbedding):
    """Token embedding that can also project hidden states back to logits.

        forward:  E[ids] (* sqrt(hidden_dim) when `scale_embeddings`)
        reverse:  logits = h E^T    (weights tied, the default)

    The paper multiplies the embeddings by sqrt(hidden_dim) and shares E with the
    pre-softmax projection (section 3.4); GPT-2 shares without scaling. It is
    Keras's `ReversibleEmbedding`, so it quantizes to int8 with the model.
    Reverse logits are float32 by default, as a mixed-precision softmax wants.

    Args:
        vocabulary_size: number of token ids.
        hidden_dim: embedding width.
        scale_embeddings: multiply the looked-up vectors by sqrt(hidden_dim).
        tie_weights: reuse E for the reverse projection (else a separate
            matrix).
        mask_zero: treat id 0 as padding and attach a Keras mask.
        embeddings_initializer: initializer of E.
        reverse_dtype: dtype of the reverse projection (default float32).

    Call arguments:
        inputs: integer ids (batch, seq), or hidden states (batch, seq,
            hidden_dim) with `reverse=True`.
        reverse: project hidden states to (batch, seq, vocabulary_size) logits.

    Example:
    >>> embedding = keras_tfm.layers.TokenEmbedding(100, 8, mask_zero=True)
    >>> hidden = embedding(np.array([[5, 7, 0]]))
    >>> embedding(hidden, reverse=True).shape
    TensorShape([1, 3, 100])
    """

    def __init__(
        self,
        vocabulary_size,
        hidden_dim,
        scale_embeddings=False,
        tie_weights=True,
        mask_zero=False,
        embeddings_initializer="uniform",
        reverse_dtype="float32",
        **kwargs,
    ):
        for name in ("input_dim", "output_dim"):
            kwargs.pop(name, None)  # from a ReversibleEmbedding config
        super().__init__(
            check_positive_int("vocabulary_size", vocabulary_size),
            check_positive_int("hidden_dim", hidden_dim),
            tie_weights=tie_weights,
            mask_zero=mask_zero,
            embeddings_initializer=embeddings_initializer,
            reverse_dtype=reverse_dtype,
            **kwargs,
        )
        self.scale_embeddings = bool(scale_embeddings)

    @property
    def vocabulary_size(self):
        return self.input_dim

    @property
    def hidden_dim(self):
        return self.output_dim

    @property
    def bfloat16_weights(self):
        """True once `cast_weights("bfloat16")` stored the tables in bfloat16."""
        return getattr(self, "_bfloat16_weights", False)

    @property
    def block_weights(self):
        """True once the table is int8 blocks (`quantize("int8_blocks")`)."""
        return getattr(self, "_block_weights", False)

    def call(self, inputs, reverse=False):
        base_call = self._bfloat16_call if self.bfloat16_weights else super().call
        if self.block_weights:
            base_call = self._block_call
        return self._embed_or_project(base_call, inputs, reverse)

    def quantize_to_blocks(self):
        """Stores the float table as symmetric int8 blocks (`int8_blocks`)."""
        self.hold_blocks(*int8_blocks(ops.convert_to_numpy(self._embeddings)))

    def hold_blocks(self, values, scale, offset):
        """Stores the (vocabulary, hidden) table as int8 blocks of 32 with a
        scale and offset each (`keras_tfm.quantized_weights.INT8_BLOCKS`): a
        lookup gathers the rows' blocks and dequantises them, the tied logits
        are `block_matmul`. An untied output table stays float.

        Example:
        >>> embedding = keras_tfm.layers.TokenEmbedding(4, 32)
        >>> embedding.build((None, None))
        >>> embedding.hold_blocks(np.full((4, 32), 2, "int8"),
        ...                       np.full((4, 1), 0.5), np.zeros((4, 1)))
        >>> embedding(np.array([[3]])).numpy()[0, 0, :2].tolist()
        [1.0, 1.0]
        """
        if self.quantization_mode is not None or self.bfloat16_weights:
            raise ValueError(
                f"Layer '{self.name}' is quantized already; store blocks in the "
                "float layer instead."
            )
        want = (self.vocabulary_size, self.hidden_dim)
        if tuple(np.shape(values)) != want or self.hidden_dim % BLOCK_SIZE:
            raise ValueError(
                f"Layer '{self.name}' needs block values of shape {want}, with "
                f"hidden_dim a multiple of {BLOCK_SIZE}. Received: "
                f"shape={tuple(np.shape(values))}"
            )
        replace_variable(self, "_embeddings", np.asarray(values, "int8"), "embeddings")
        for name, part in (("block_scale", scale), ("block_offset", offset)):
            replace_variable(self, name, np.asarray(part, "float16"), name=name)
        self._block_weights = True

    def _block_call(self, inputs, reverse=False):
        if not reverse:
            ids = ops.cast(inputs, "int32")
            rows = [ops.take(v, ids, axis=0) for v in self._block_variables()]
            values, scale, offset = rows  # (..., hidden), (..., hidden / 32) x2

            def each_weight(part):  # (..., hidden / 32) -> (..., hidden)
                part = ops.cast(part, self.compute_dtype)
                return ops.repeat(part, BLOCK_SIZE, axis=-1)

            values = ops.cast(values, self.compute_dtype)
            return values * each_weight(scale) + each_weight(offset)
        inputs = ops.cast(inputs, self.reverse_dtype or self.compute_dtype)
        if self.tie_weights:
            logits = block_matmul(inputs, *self._block_variables())
        else:
            logits = ops.matmul(inputs, ops.cast(self.reverse_embeddings, inputs.dtype))
        return self._soft_cap(logits)

    def _block_variables(self):
        return [self._embeddings, self.block_scale, self.block_offset]

    # Int8 blocks are saved as held: values, scale, offset (then an untied
    # output table).
    def save_own_variables(self, store):
        if not self.block_weights:
            return super().save_own_variables(store)
        own = self._block_variables()
        own += [] if self.tie_weights else [self.reverse_embeddings]
        for i, variable in enumerate(own):
            store[str(i)] = ops.convert_to_numpy(variable)
        return None

    def load_own_variables(self, store):
        if not self.block_weights:
            return super().load_own_variables(store)
        own = self._block_variables()
        own += [] if self.tie_weights else [self.reverse_embeddings]
        for i, variable in enumerate(own):
            variable.assign(store[str(i)])
        return None

    def _bfloat16_call(self, inputs, reverse=False):
        if not reverse:
            # Keras's Embedding.call with the bfloat16 rows cast on lookup.
            outputs = ops.take(self._embeddings, ops.cast(inputs, "int32"), axis=0)
            return ops.cast(outputs, self.compute_dtype)
        inputs = ops.cast(inputs, self.reverse_dtype or self.compute_dtype)
        if self.tie_weights:
            # The (vocabulary, hidden) table is already output-major.
            logits = weight_only_matmul(inputs, self._embeddings)
        else:
            kernel = ops.cast(self.reverse_embeddings, inputs.dtype)
            logits = ops.matmul(inputs, kernel)
        return self._soft_cap(logits)

    def quantized_call(self, inputs, reverse=False):
        # Keras routes a quantized layer's __call__ here instead of `call`.
        return self._embed_or_project(super().quantized_call, inputs, reverse)

    def _int8_call(self, inputs, reverse=False):
        weight_only = getattr(self, "inputs_quantizer", None) is None
        if not (reverse and self.tie_weights and weight_only):
            return super()._int8_call(inputs, reverse=reverse)
        # The (vocabulary, hidden) table is already output-major for the logits.
        logits = weight_only_matmul(inputs, self._embeddings, self.embeddings_scale)
        return self._soft_cap(ops.cast(logits, self.compute_dtype))

    def _soft_cap(self, logits):
        if self.logit_soft_cap is None:
            return logits
        cap = self.logit_soft_cap
        return ops.multiply(ops.tanh(ops.divide(logits, cap)), cap)

    def quantize(self, mode=None, type_check=True, config=None):
        if self.bfloat16_weights or self.block_weights:
            raise ValueError(
                f"Layer '{self.name}' already holds {self._embeddings.dtype} "
                f"tables; quantize the float layer instead. Received: mode={mode!r}"
            )
        # Keras refuses to quantize subclasses (`type_check`) in case they
        # override `call`; ours sends `quantized_call` through the same checks,
        # scaling and mask as `call`, so the parent's int8/int4 path is valid.
        super().quantize(mode, type_check=False, config=config)

    def enable_lora(self, *args, **kwargs):
        if self.bfloat16_weights:
            raise ValueError(
                f"Layer '{self.name}' holds bfloat16 tables, which do not take "
                "LoRA adapters: enable LoRA on the float model."
            )
        super().enable_lora(*args, **kwargs)

    def cast_weights(self, dtype):
        """Stores the tables in `dtype` ("bfloat16"); lookups and logits keep
        their float dtype.

        Example:
        >>> embedding = keras_tfm.layers.TokenEmbedding(100, 8)
        >>> embedding.build((None, None))
        >>> embedding.cast_weights("bfloat16")
        >>> embedding(np.array([[5, 7]])).dtype
        tf.float32
        """
        stored = self.quantization_mode is not None or self.bfloat16_weights
        check_cast_dtype(dtype, self, stored, weights="tables")
        if self.lora_enabled:
            raise ValueError(
                f"Layer '{self.name}' has LoRA enabled: merge the adapters into "
                f"a float layer before storing its tables in {dtype}."
            )
        names = ["_embeddings"] + ([] if self.tie_weights else ["reverse_embeddings"])
        for name in names:
            values = ops.convert_to_numpy(getattr(self, name)).astype(dtype)
            replace_variable(self, name, values, name=name.lstrip("_"))
        self._bfloat16_weights = True

    def _check_id_range(self, ids):
        """Refuses ids outside [0, vocabulary_size) where their values are known.

        A lookup past the table is an error on CPU but silently gives zeros on
        GPU, and a negative id is never meaningful. Eager calls are checked
        here; inside a traced function (fit, XLA) the values are not known.
        """
        if not callable(getattr(ids, "numpy", None)):
            return
        try:
            values = np.asarray(ids.numpy())
        except (AttributeError, NotImplementedError, TypeError):
            return  # a traced tensor
        if values.size == 0:
            return
        low, high = int(values.min()), int(values.max())
        if low < 0 or high >= self.vocabulary_size:
            bad = low if low < 0 else high
            raise ValueError(
                "Every token id must be in [0, vocabulary_size="
                f"{self.vocabulary_size}). Received: token id {bad} (ids range "
                f"from {low} to {high})"
            )

    def _embed_or_project(self, base_call, inputs, reverse):
        if reverse:
            if inputs.shape[-1] is not None and inputs.shape[-1] != self.hidden_dim:
                raise ValueError(
                    f"Reverse projection expects a last dimension of {self.hidden_dim}."
                    f" Received: inputs.shape={tuple(inputs.shape)}"
                )
            return base_call(inputs, reverse=True)
        if "int" not in keras.backend.standardize_dtype(inputs.dtype):
            raise ValueError(
                "TokenEmbedding expects integer token ids. Received: "
                f"inputs.dtype={keras.backend.standardize_dtype(inputs.dtype)}"
            )
        self._check_id_range(inputs)
        outputs = base_call(inputs)
        mask = get_keras_mask(outputs)
        if mask is None and self.mask_zero:
            mask = ops.not_equal(inputs, 0)  # the quantized lookup sets none
        if self.scale_embeddings:
            outputs = outputs * ops.cast(math.sqrt(self.hidden_dim), outputs.dtype)
        if mask is not None:
            set_keras_mask(outputs, mask)
        return outputs

    def get_config(self):
        config = super().get_config()
        for name in ("input_dim", "output_dim"):
            config.pop(name)
        config.update(
            {
                "vocabulary_size": self.vocabulary_size,
                "hidden_dim": self.hidden_dim,
                "scale_embeddings": self.scale_embeddings,
            }
        )
        return config

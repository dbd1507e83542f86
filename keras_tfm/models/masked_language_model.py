import keras
import keras_hub

from keras_tfm.models.encoder_backbone import (
    EncoderBackbone,
    unpack_encoder_inputs,
)
from keras_tfm.models.quantization import QuantizationMixin
from keras_tfm.validation import check_rank

INPUT_KEYS = ("token_ids", "mask_positions", "segment_ids", "padding_mask")


@keras.saving.register_keras_serializable(package="keras_tfm")
class MaskedLanguageModel(QuantizationMixin, keras.Model):
    """BERT's masked-language-model head on an `EncoderBackbone`.

    For the hidden states h at the masked positions only:

        logits = LayerNorm(GELU(h W + b)) E^T + b_out

    where E is the backbone's token embedding (the projection is tied to it)
    and GELU is the exact (erf) form. This is keras-hub's `MaskedLMHead`
    (sublayer `mlm_head` with `intermediate_dense`, `intermediate_layer_norm`
    and `output_bias`, HuggingFace's `cls.predictions`). Computing logits at
    the masked positions only keeps the loss there and saves the
    (batch, seq, vocabulary_size) projection. `MaskedLMMasker` prepares
    `(x, y, sample_weight)` batches for `fit`; compile with
    `SparseCategoricalCrossentropy(from_logits=True,
    reduction="mean_with_sample_weight")` and `weighted_metrics`, so that the
    loss and metrics average over the real selections only (the masker pads
    unused slots with weight 0).

    Args:
        backbone: an `EncoderBackbone`; `mlm.backbone` can later feed an
            `EncoderClassifier`.

    Call arguments:
        inputs: a dict with "token_ids" (batch, seq), "mask_positions"
            (batch, num_masked) int positions to predict, and optionally
            "segment_ids" and "padding_mask" (see `EncoderBackbone`).
        training: whether dropout is active.

    Returns:
        Logits of shape (batch, num_masked, vocabulary_size), float32 under a
        mixed policy.

    Example:
    >>> backbone = keras_tfm.models.EncoderBackbone(
    ...     vocabulary_size=50, num_layers=1, num_heads=2, hidden_dim=16,
    ...     intermediate_dim=32, max_sequence_length=8)
    >>> mlm = keras_tfm.models.MaskedLanguageModel(backbone)
    >>> mlm({"token_ids": np.array([[2, 3, 7, 0]]),
    ...      "mask_positions": np.array([[1, 2]])}).shape
    TensorShape([1, 2, 50])
    """

    def __init__(self, backbone, **kwargs):
        if not isinstance(backbone, EncoderBackbone):
            raise ValueError(
                "`backbone` must be an EncoderBackbone. "
                f"Received: backbone={backbone!r}"
            )
        super().__init__(**kwargs)
        self.backbone = backbone
        # keras-hub's MaskedLMHead (autocast=False) adds its float32 bias to
        # logits cast to the compute dtype, which fails under a mixed policy;
        # there the head runs in float32, as the logits should anyway.
        policy = self.dtype_policy
        if policy.compute_dtype != policy.variable_dtype:
            policy = keras.DTypePolicy(policy.variable_dtype)
        self.mlm_head = keras_hub.layers.MaskedLMHead(
            token_embedding=backbone.token_embedding,
            intermediate_activation="gelu",  # keras's gelu is the exact form
            layer_norm_epsilon=backbone.layer_norm_epsilon,
            kernel_initializer=keras.initializers.TruncatedNormal(stddev=0.02),
            dtype=policy,
            name="mlm_head",
        )
        # Built with both shapes: `summary()` passes the recorded build shapes
        # to its compute_output_shape, which needs `mask_positions_shape`.
        self.mlm_head.build((None, None, backbone.hidden_dim), (None, None))
        self.built = True

    def call(self, inputs, training=None):
        if not isinstance(inputs, dict) or "mask_positions" not in inputs:
            raise ValueError(
                "`inputs` must be a dict with 'token_ids' and 'mask_positions'. "
                f"Received: inputs={inputs!r}"
            )
        inputs = unpack_encoder_inputs(inputs, INPUT_KEYS)
        mask_positions = inputs.pop("mask_positions")
        check_rank("mask_positions", mask_positions, 2, "(batch, num_masked)")
        dtype = keras.backend.standardize_dtype(mask_positions.dtype)
        if "int" not in dtype:
            raise ValueError(
                "`mask_positions` must hold integer positions. "
                f"Received: mask_positions.dtype={dtype}"
            )
        hidden = self.backbone(inputs, training=training)
        return self.mlm_head(hidden, mask_positions=mask_positions)

    def get_config(self):
        config = super().get_config()
        config["backbone"] = keras.saving.serialize_keras_object(self.backbone)
        return self._add_quantization_config(config)

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["backbone"] = keras.saving.deserialize_keras_object(config["backbone"])
        return cls._from_quantized_config(config)

import keras

from keras_tfm.models.class_labels import ClassLabelCheckMixin
from keras_tfm.models.encoder_backbone import EncoderBackbone, unpack_encoder_inputs
from keras_tfm.models.pooling import mean_pool
from keras_tfm.models.quantization import QuantizationMixin
from keras_tfm.models.tokenizer_attachment import restore_tokenizer, serialize_tokenizer
from keras_tfm.validation import check_choice, check_positive_int, check_rate

POOLINGS = ("cls", "mean")


@keras.saving.register_keras_serializable(package="keras_tfm")
class EncoderClassifier(QuantizationMixin, ClassLabelCheckMixin, keras.Model):
    """Sequence classification on top of an `EncoderBackbone`.

        cls:   pooled = tanh(h[:, 0] W_p + b_p)     (BERT's pooler)
        mean:  pooled = sum_t m_t h_t / sum_t m_t   (m = padding mask)
        logits = Dropout(pooled) W_c + b_c

    "mean" averages over real tokens only, so padding never changes the
    result. Sublayers: `pooler` (Dense + tanh, "cls" only), `classifier_dropout`
    and `classifier` (Dense to `num_classes`), as in HuggingFace's
    `BertForSequenceClassification`. A backbone pretrained with
    `MaskedLanguageModel` is reused as `EncoderClassifier(backbone=mlm.backbone,
    num_classes=...)`; its weights are shared, not copied. `fit` and
    `evaluate` check the labels (arrays eagerly, datasets in the input
    pipeline, so also under XLA) and raise a ValueError naming the valid range
    [0, num_classes) for an id outside it.

    Args:
        backbone: an `EncoderBackbone`.
        num_classes: number of classes.
        pooling: "cls" (the first token) or "mean" (over real tokens).
        dropout: dropout rate before the classification layer.
        tokenizer: optional keras-hub tokenizer (e.g. a `WordPieceTokenizer`);
            saved with the model (its vocabulary as an asset), so that a
            `.keras` file or preset carries what it needs to read text.

    Call arguments:
        inputs: what the backbone takes: int token ids (batch, seq), or a dict
            with "token_ids" and optionally "segment_ids" and "padding_mask".
        training: whether dropout is active.

    Returns:
        Logits of shape (batch, num_classes), float32 under a mixed policy.

    Example:
    >>> backbone = keras_tfm.models.EncoderBackbone(
    ...     vocabulary_size=50, num_layers=1, num_heads=2, hidden_dim=16,
    ...     intermediate_dim=32, max_sequence_length=8)
    >>> classifier = keras_tfm.models.EncoderClassifier(backbone, num_classes=3)
    >>> classifier(np.array([[2, 5, 7, 0]])).shape
    TensorShape([1, 3])
    """

    def __init__(
        self,
        backbone,
        num_classes,
        pooling="cls",
        dropout=0.0,
        tokenizer=None,
        **kwargs,
    ):
        if not isinstance(backbone, EncoderBackbone):
            raise ValueError(
                "`backbone` must be an EncoderBackbone. "
                f"Received: backbone={backbone!r}"
            )
        super().__init__(**kwargs)
        self.backbone = backbone
        self.num_classes = check_positive_int("num_classes", num_classes)
        self.pooling = check_choice("pooling", pooling, POOLINGS)
        self.dropout = check_rate("dropout", dropout)
        self.tokenizer = restore_tokenizer(tokenizer)

        hidden_dim = backbone.hidden_dim
        policy = self.dtype_policy
        self.pooler = None
        if self.pooling == "cls":
            self.pooler = keras.layers.Dense(
                hidden_dim,
                activation="tanh",
                kernel_initializer=keras.initializers.TruncatedNormal(stddev=0.02),
                dtype=policy,
                name="pooler",
            )
            self.pooler.build((None, hidden_dim))
        self.classifier_dropout = keras.layers.Dropout(
            self.dropout, dtype=policy, name="classifier_dropout"
        )
        self.classifier_dropout.build((None, hidden_dim))
        if policy.compute_dtype != policy.variable_dtype:
            # Mixed precision: float32 logits for a stable softmax and loss.
            policy = keras.DTypePolicy(policy.variable_dtype)
        self.classifier = keras.layers.Dense(
            num_classes,
            kernel_initializer=keras.initializers.TruncatedNormal(stddev=0.02),
            dtype=policy,
            name="classifier",
        )
        self.classifier.build((None, hidden_dim))
        self.built = True

    def call(self, inputs, training=None):
        inputs = unpack_encoder_inputs(inputs)
        hidden = self.backbone(inputs, training=training)
        if self.pooling == "cls":
            pooled = self.pooler(hidden[:, 0, :])
        else:
            pooled = mean_pool(hidden, self.backbone.padding_mask(inputs))
        pooled = self.classifier_dropout(pooled, training=training)
        return self.classifier(pooled)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "backbone": keras.saving.serialize_keras_object(self.backbone),
                "num_classes": self.num_classes,
                "pooling": self.pooling,
                "dropout": self.dropout,
                "tokenizer": serialize_tokenizer(self.tokenizer),
            }
        )
        return self._add_quantization_config(config)

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["backbone"] = keras.saving.deserialize_keras_object(config["backbone"])
        return cls._from_quantized_config(config)

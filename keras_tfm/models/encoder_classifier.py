import keras
import numpy as np

from keras_tfm.models.encoder_backbone import unpack_encoder_inputs
from keras_tfm.models.encoder_task import EncoderTask
from keras_tfm.models.pooling import mean_pool
from keras_tfm.models.quantization import QuantizationMixin
from keras_tfm.models.tokenizer_attachment import is_text
from keras_tfm.quantized_weights import QuantizableDense
from keras_tfm.validation import check_choice, check_positive_int, check_rate

POOLINGS = ("cls", "mean")


def check_class_names(class_names, num_classes):
    """None, or a list of `num_classes` distinct strings."""
    if class_names is None:
        return None
    names = list(class_names) if isinstance(class_names, list | tuple) else None
    if (
        names is None
        or len(names) != num_classes
        or not all(isinstance(n, str) for n in names)
        or len(set(names)) != len(names)
    ):
        raise ValueError(
            f"`class_names` must be None or {num_classes} distinct strings "
            f"(one per class). Received: class_names={class_names!r}"
        )
    return names


@keras.saving.register_keras_serializable(package="keras_tfm")
class EncoderClassifier(QuantizationMixin, EncoderTask):
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
    `evaluate` (the `Task`'s) check the labels (arrays eagerly, datasets in
    the input pipeline, so also under XLA) and raise a ValueError naming the
    valid range [0, num_classes) for an id outside it.

    Args:
        backbone: an `EncoderBackbone`.
        num_classes: number of classes.
        pooling: "cls" (the first token) or "mean" (over real tokens).
        dropout: dropout rate before the classification layer.
        preprocessor: optional `TextClassifierPreprocessor` (it owns the
            tokenizer, saved with the model, its vocabulary as an asset).
            With it, `predict`, `fit`, `evaluate` and `classify` take raw
            strings, as keras-hub's tasks do.
        class_names: optional names of the classes, by index (e.g. the
            categories a dataset loader returns); `classify` returns them.
            Saved in the config, so a preset carries its label set.

    Call arguments:
        inputs: what the backbone takes: int token ids (batch, seq), or a dict
            with "token_ids" and optionally "segment_ids" and "padding_mask"
            (what the preprocessor returns).
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

    With a preprocessor and class names, strings go in and names come out:
    >>> tokenizer = keras_tfm.data.train_word_piece_tokenizer(
    ...     ["the cat sat", "a dog ran"], vocabulary_size=40)
    >>> preprocessor = keras_tfm.models.TextClassifierPreprocessor(
    ...     tokenizer, sequence_length=8)
    >>> classifier = keras_tfm.models.EncoderClassifier(
    ...     backbone, num_classes=3, preprocessor=preprocessor,
    ...     class_names=["cats", "dogs", "other"])
    >>> classifier.predict(["the cat sat", "a dog"], verbose=0).shape
    (2, 3)
    >>> classifier.classify("the cat sat") in classifier.class_names
    True
    """

    label_kind = "class"

    def __init__(
        self,
        backbone,
        num_classes,
        pooling="cls",
        dropout=0.0,
        preprocessor=None,
        class_names=None,
        **kwargs,
    ):
        super().__init__(backbone, preprocessor, **kwargs)
        self.num_classes = check_positive_int("num_classes", num_classes)
        self.pooling = check_choice("pooling", pooling, POOLINGS)
        self.dropout = check_rate("dropout", dropout)
        self.class_names = check_class_names(class_names, self.num_classes)

        hidden_dim = backbone.hidden_dim
        policy = self.dtype_policy
        self.pooler = None
        if self.pooling == "cls":
            self.pooler = QuantizableDense(
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
        self.classifier = QuantizableDense(
            num_classes,
            kernel_initializer=keras.initializers.TruncatedNormal(stddev=0.02),
            dtype=policy,
            name="classifier",
        )
        self.classifier.build((None, hidden_dim))
        self.built = True

    def label_range(self):
        return self.num_classes

    def call(self, inputs, training=None):
        pooled = self.pool(inputs, training=training)
        pooled = self.classifier_dropout(pooled, training=training)
        return self.classifier(pooled)

    def pool(self, inputs, training=None):
        """What the `classifier` layer reads, before dropout: (batch, hidden_dim).

        The features a linear probe of this model is fitted on
        (`keras_tfm.training.probe_head`). Takes what `call` takes, token ids
        or an input dict, or strings (read by the preprocessor).
        """
        if is_text(inputs):
            inputs = self.encode_texts(inputs)
        inputs = unpack_encoder_inputs(inputs)
        hidden = self.backbone(inputs, training=training)
        if self.pooling == "cls":
            return self.pooler(hidden[:, 0, :])
        return mean_pool(hidden, self.backbone.padding_mask(inputs))

    def encode_texts(self, texts):
        """The preprocessor's inputs for strings, padded to the longest.

        Args:
            texts: a string or a list of strings.

        Returns:
            A dict with "token_ids" (int32) and "padding_mask" (bool), each
            (len(texts), length), `length` the longest "[CLS] text [SEP]"
            (at most the preprocessor's `sequence_length`); padding changes
            no prediction (it is masked).
        """
        texts, _ = self._read_texts(texts)
        return self.preprocessor.pack_texts(texts)

    def classify(self, texts, top_k=None, batch_size=32):
        """The class of each text: its name (or index without `class_names`).

        Args:
            texts: a string or a list of strings (an empty list gives []).
            top_k: None for the best class; an int k for the k most probable
                classes with their probabilities, best first.
            batch_size: how many texts go through the model at once.

        Returns:
            For one string, its class name (an int index when the model has
            no `class_names`), or with `top_k` a list of `(name, probability)`
            pairs; for a list of strings, a list of those.

        Example:
        >>> model = keras_tfm.models.EncoderClassifier.from_preset(
        ...     "fortunes_classifier")
        >>> model.classify("Real programmers use vi.") in model.class_names
        True
        >>> model.classify([])
        []
        """
        texts, single = self._read_texts(texts)
        if top_k is not None:
            if (
                isinstance(top_k, bool)
                or not isinstance(top_k, int)
                or not 1 <= top_k <= self.num_classes
            ):
                raise ValueError(
                    f"`top_k` must be None or an int in [1, {self.num_classes}]. "
                    f"Received: top_k={top_k!r}"
                )
        check_positive_int("batch_size", batch_size)
        if not texts:
            return []
        logits = []
        for start in range(0, len(texts), batch_size):
            inputs = self.preprocessor.pack_texts(texts[start : start + batch_size])
            logits.append(
                np.asarray(
                    keras.ops.convert_to_numpy(self(inputs, training=False)), "float64"
                )
            )
        logits = np.concatenate(logits)
        probabilities = np.exp(logits - logits.max(axis=1, keepdims=True))
        probabilities /= probabilities.sum(axis=1, keepdims=True)
        names = self.class_names or list(range(self.num_classes))
        if top_k is None:
            results = [names[i] for i in probabilities.argmax(axis=1)]
        else:
            order = np.argsort(-probabilities, axis=1, kind="stable")[:, :top_k]
            results = [
                [(names[i], float(row[i])) for i in best]
                for row, best in zip(probabilities, order, strict=True)
            ]
        return results[0] if single else results

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_classes": self.num_classes,
                "pooling": self.pooling,
                "dropout": self.dropout,
                "class_names": self.class_names,
            }
        )
        return self._add_quantization_config(config)

    @classmethod
    def from_config(cls, config):
        return cls._from_quantized_config(cls._deserialize_parts(config))

import keras
import numpy as np
from keras import ops

from keras_tfm.models.encoder_backbone import unpack_encoder_inputs
from keras_tfm.models.encoder_task import EncoderTask
from keras_tfm.models.pooling import mean_pool
from keras_tfm.models.quantization import QuantizationMixin
from keras_tfm.validation import check_positive_int


@keras.saving.register_keras_serializable(package="keras_tfm")
class SentenceEncoder(QuantizationMixin, EncoderTask):
    """Sentence embeddings: an `EncoderBackbone`'s mean over real tokens.

        e = m / |m|,   m = sum_t mask_t h_t / sum_t mask_t

    the pooling of sentence-transformers' all-MiniLM-L6-v2, so the dot
    product of two embeddings is their cosine similarity. With a
    preprocessor (a `TextClassifierPreprocessor`: sentence-transformers
    packs a text as "[CLS] text [SEP]", as BERT's classifiers do), `encode`
    and `predict` take strings.

    Args:
        backbone: an `EncoderBackbone`.
        preprocessor: optional `TextClassifierPreprocessor`, saved with the
            model; its `sequence_length` is the texts' token limit ([CLS]
            and [SEP] included), at most the backbone's
            `max_sequence_length`.
        normalize: scale each embedding to unit length (default True).

    Call arguments:
        inputs: what the backbone takes: token ids (batch, seq) or a dict
            with "token_ids" and optionally "segment_ids" and "padding_mask".

    Returns:
        float32 embeddings (batch, hidden_dim).

    Example:
    >>> minilm = keras_tfm.models.SentenceEncoder.from_preset("all_minilm_l6_v2")
    >>> a, b, c = minilm.encode(
    ...     ["A man is eating food.", "A man eats a meal.", "The sky is blue."])
    >>> bool(a @ b > a @ c)
    True
    """

    def __init__(self, backbone, preprocessor=None, normalize=True, **kwargs):
        super().__init__(backbone, preprocessor, **kwargs)
        self.normalize = bool(normalize)
        self.built = True

    @property
    def max_sequence_length(self):
        """The texts' token limit: the preprocessor's `sequence_length`."""
        if self.preprocessor is None:
            return self.backbone.max_sequence_length
        return self.preprocessor.sequence_length

    def call(self, inputs, training=None):
        inputs = unpack_encoder_inputs(inputs)
        hidden = self.backbone(inputs, training=training)
        pooled = ops.cast(
            mean_pool(hidden, self.backbone.padding_mask(inputs)), "float32"
        )
        if self.normalize:
            pooled = pooled / ops.maximum(
                ops.norm(pooled, axis=-1, keepdims=True), 1e-12
            )
        return pooled

    def encode(self, texts, batch_size=32):
        """Embeddings of a string or a list of strings, as a NumPy array.

        Returns (hidden_dim,) for one string, (len(texts), hidden_dim) for a
        list (an empty list gives (0, hidden_dim)). Texts are batched by
        length, each batch padded to its longest.
        """
        texts, single = self._read_texts(texts)
        check_positive_int("batch_size", batch_size)
        embeddings = np.zeros((len(texts), self.backbone.hidden_dim), "float32")
        if not texts:
            return embeddings
        packed = self.preprocessor.pack_texts(texts, trim=False)
        lengths = packed["padding_mask"].sum(axis=1)
        order = np.argsort(lengths, kind="stable")
        for start in range(0, len(texts), batch_size):
            rows = order[start : start + batch_size]
            length = int(lengths[rows].max())
            inputs = {key: value[rows, :length] for key, value in packed.items()}
            embeddings[rows] = ops.convert_to_numpy(self(inputs))
        return embeddings[0] if single else embeddings

    def get_config(self):
        config = super().get_config()
        config["normalize"] = self.normalize
        return self._add_quantization_config(config)

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        # Files saved before issue 36 hold a `tokenizer` and the texts' limit.
        length = config.pop("max_sequence_length", None)
        return cls._from_quantized_config(cls._deserialize_parts(config, length))

import keras
import numpy as np
from keras import ops

from keras_tfm.models.encoder_backbone import EncoderBackbone, unpack_encoder_inputs
from keras_tfm.models.pooling import mean_pool
from keras_tfm.models.tokenizer_attachment import restore_tokenizer, serialize_tokenizer
from keras_tfm.validation import check_positive_int


@keras.saving.register_keras_serializable(package="keras_tfm")
class SentenceEncoder(keras.Model):
    """Sentence embeddings: an `EncoderBackbone`'s mean over real tokens.

        e = m / |m|,   m = sum_t mask_t h_t / sum_t mask_t

    the pooling of sentence-transformers' all-MiniLM-L6-v2, so the dot
    product of two embeddings is their cosine similarity. With a tokenizer
    attached (a BERT-style one with `cls_token_id`, `sep_token_id` and
    `pad_token_id`), `encode` takes strings.

    Args:
        backbone: an `EncoderBackbone`.
        tokenizer: optional keras-hub BERT-style tokenizer, saved with the model.
        normalize: scale each embedding to unit length (default True).
        max_sequence_length: texts are cut to this many tokens, [CLS] and
            [SEP] included; default: the backbone's `max_sequence_length`.

    Call arguments:
        inputs: what the backbone takes: token ids (batch, seq) or a dict
            with "token_ids" and optionally "segment_ids" and "padding_mask".

    Returns:
        float32 embeddings (batch, hidden_dim).

    Example:
    >>> minilm = keras_tfm.zoo.from_preset("all_minilm_l6_v2")
    >>> a, b, c = minilm.encode(
    ...     ["A man is eating food.", "A man eats a meal.", "The sky is blue."])
    >>> bool(a @ b > a @ c)
    True
    """

    def __init__(
        self,
        backbone,
        tokenizer=None,
        normalize=True,
        max_sequence_length=None,
        **kwargs,
    ):
        if not isinstance(backbone, EncoderBackbone):
            raise ValueError(
                "`backbone` must be an EncoderBackbone. "
                f"Received: backbone={backbone!r}"
            )
        super().__init__(**kwargs)
        self.backbone = backbone
        self.tokenizer = restore_tokenizer(tokenizer)
        self.normalize = bool(normalize)
        if max_sequence_length is None:
            max_sequence_length = backbone.max_sequence_length
        self.max_sequence_length = check_positive_int(
            "max_sequence_length", max_sequence_length
        )
        if max_sequence_length > backbone.max_sequence_length:
            raise ValueError(
                "`max_sequence_length` must be at most the backbone's "
                f"({backbone.max_sequence_length}). Received: "
                f"max_sequence_length={max_sequence_length}"
            )
        self.built = True

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
        list. Texts are batched by length, each batch padded to its longest.
        """
        single = isinstance(texts, str)
        texts = [texts] if single else list(texts)
        if self.tokenizer is None:
            raise ValueError(
                "This SentenceEncoder has no tokenizer, so it cannot read text: "
                "pass `tokenizer=` when building it, or call it on token ids."
            )
        if not texts or not all(isinstance(t, str) for t in texts):
            raise ValueError(
                "`texts` must be a string or a non-empty list of strings. "
                f"Received: {texts!r:.200}"
            )
        check_positive_int("batch_size", batch_size)
        token_lists = [self._token_ids(t) for t in texts]
        order = np.argsort([len(ids) for ids in token_lists], kind="stable")
        embeddings = np.zeros((len(texts), self.backbone.hidden_dim), "float32")
        for start in range(0, len(texts), batch_size):
            rows = order[start : start + batch_size]
            length = max(len(token_lists[i]) for i in rows)
            ids = np.full((len(rows), length), self.tokenizer.pad_token_id, "int32")
            mask = np.zeros((len(rows), length), "int32")
            for row, i in enumerate(rows):
                ids[row, : len(token_lists[i])] = token_lists[i]
                mask[row, : len(token_lists[i])] = 1
            embeddings[rows] = ops.convert_to_numpy(
                self({"token_ids": ids, "padding_mask": mask})
            )
        return embeddings[0] if single else embeddings

    def _token_ids(self, text):
        pieces = ops.convert_to_numpy(self.tokenizer(text)).tolist()
        pieces = pieces[: self.max_sequence_length - 2]
        return [self.tokenizer.cls_token_id, *pieces, self.tokenizer.sep_token_id]

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "backbone": keras.saving.serialize_keras_object(self.backbone),
                "tokenizer": serialize_tokenizer(self.tokenizer),
                "normalize": self.normalize,
                "max_sequence_length": self.max_sequence_length,
            }
        )
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["backbone"] = keras.saving.deserialize_keras_object(config["backbone"])
        return cls(**config)

import keras
import keras_hub
import numpy as np

from keras_tfm._optional import tensorflow as tf
from keras_tfm._optional import use_tf_graph
from keras_tfm.models.preprocessor import (
    PackedLength,
    Preprocessor,
    as_backend_tensors,
    is_text,
)


@keras.saving.register_keras_serializable(package="keras_tfm")
class Seq2SeqLMPreprocessor(Preprocessor):
    """Source and target strings to teacher-forced batches, and text for `generate`.

    Called on `(sources, targets)` strings (inside `tf.data` too) it returns
    `({"source_ids", "target_ids"}, labels, sample_weight)`: the source
    tokenized and padded to `encoder_sequence_length`; the target wrapped as
    start, text, end and padded to `decoder_sequence_length + 1` ids `t`,
    with `target_ids = t[:, :-1]` (teacher forcing), `labels = t[:, 1:]` and
    `sample_weight` 1 on real labels. Integer inputs pass through. Inside
    `tf.data` it is TensorFlow ops; eagerly it is Python (no TensorFlow
    needed), with the same ids.

    Args:
        tokenizer: a keras-hub tokenizer with start and end tokens (e.g. a
            `WordPieceTokenizer` with "[START]" and "[END]").
        encoder_sequence_length: the source length.
        decoder_sequence_length: the target length.
        padding_id: the id of padded slots (the backbone's `padding_id`).

    Example:
    >>> tokenizer = keras_tfm.data.train_word_piece_tokenizer(
    ...     ["ich habe einen hund", "i have a dog"], vocabulary_size=60,
    ...     reserved_tokens=["[PAD]", "[UNK]", "[START]", "[END]"])
    >>> preprocessor = keras_tfm.models.Seq2SeqLMPreprocessor(
    ...     tokenizer, encoder_sequence_length=6, decoder_sequence_length=6)
    >>> x, labels, weight = preprocessor(["ich habe"], ["i have"])
    >>> x["target_ids"].shape, labels.shape
    (TensorShape([1, 6]), TensorShape([1, 6]))
    """

    encoder_sequence_length = PackedLength("encoder_packer")
    decoder_sequence_length = PackedLength("decoder_packer", extra=1)

    def __init__(
        self,
        tokenizer,
        encoder_sequence_length=128,
        decoder_sequence_length=128,
        padding_id=0,
        **kwargs,
    ):
        super().__init__(tokenizer, **kwargs)
        self.encoder_sequence_length = encoder_sequence_length
        self.decoder_sequence_length = decoder_sequence_length
        self.padding_id = padding_id
        pad = 0 if padding_id is None else padding_id
        self.encoder_packer = keras_hub.layers.StartEndPacker(
            sequence_length=self.encoder_sequence_length,
            pad_value=pad,
            name="encoder_packer",
        )
        self.decoder_packer = keras_hub.layers.StartEndPacker(
            sequence_length=self.decoder_sequence_length + 1,
            start_value=self.start_token_id,
            end_value=self.end_token_id,
            pad_value=pad,
            return_padding_mask=True,
            name="decoder_packer",
        )

    def call(self, x, y=None, sample_weight=None):
        if isinstance(x, dict):  # ids already: {"source_ids", "target_ids"}
            return keras.utils.pack_x_y_sample_weight(x, y, sample_weight)
        if not use_tf_graph(x):
            return self._call_python(x, y)
        sources = tf.convert_to_tensor(x)
        if sources.dtype != tf.string:
            raise ValueError(
                "A Seq2SeqLMPreprocessor takes source strings (with target "
                "strings as `y`), or a dict of ids. Received: x of dtype "
                f"{sources.dtype.name}"
            )
        source_ids = tf.cast(self.encoder_packer(self.tokenizer(sources)), "int32")
        targets, mask = self.decoder_packer(self.tokenizer(tf.convert_to_tensor(y)))
        targets = tf.cast(targets, "int32")
        inputs = {"source_ids": source_ids, "target_ids": targets[..., :-1]}
        return keras.utils.pack_x_y_sample_weight(
            inputs, targets[..., 1:], tf.cast(mask[..., 1:], "int32")
        )

    def _call_python(self, x, y):
        for name, texts in (("x", x), ("y", y)):
            if not is_text(texts):
                raise ValueError(
                    "A Seq2SeqLMPreprocessor takes source strings (with target "
                    f"strings as `y`), or a dict of ids. Received: {name}="
                    f"{str(texts)[:80]}"
                )

        def numpy(t):
            return np.asarray(keras.ops.convert_to_numpy(t))

        source_ids = numpy(self.encoder_packer(self.tokenizer(x))).astype("int32")
        targets, mask = (numpy(t) for t in self.decoder_packer(self.tokenizer(y)))
        targets = targets.astype("int32")
        source_ids, target_ids, labels, weights = as_backend_tensors(
            source_ids,
            targets[..., :-1],
            targets[..., 1:],
            mask[..., 1:].astype("int32"),
        )
        inputs = {"source_ids": source_ids, "target_ids": target_ids}
        return inputs, labels, weights

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "encoder_sequence_length": self.encoder_sequence_length,
                "decoder_sequence_length": self.decoder_sequence_length,
                "padding_id": self.padding_id,
            }
        )
        return config

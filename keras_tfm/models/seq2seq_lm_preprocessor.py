import keras
import keras_hub

from keras_tfm._optional import tensorflow as tf
from keras_tfm.models.preprocessor import Preprocessor
from keras_tfm.validation import check_positive_int


@keras.saving.register_keras_serializable(package="keras_tfm")
class Seq2SeqLMPreprocessor(Preprocessor):
    """Source and target strings to teacher-forced batches, and text for `generate`.

    Called on `(sources, targets)` strings (inside `tf.data` too) it returns
    `({"source_ids", "target_ids"}, labels, sample_weight)`: the source
    tokenized and padded to `encoder_sequence_length`; the target wrapped as
    start, text, end and padded to `decoder_sequence_length + 1` ids `t`,
    with `target_ids = t[:, :-1]` (teacher forcing), `labels = t[:, 1:]` and
    `sample_weight` 1 on real labels. Integer inputs pass through.

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

    def __init__(
        self,
        tokenizer,
        encoder_sequence_length=128,
        decoder_sequence_length=128,
        padding_id=0,
        **kwargs,
    ):
        super().__init__(tokenizer, **kwargs)
        self.encoder_sequence_length = check_positive_int(
            "encoder_sequence_length", encoder_sequence_length
        )
        self.decoder_sequence_length = check_positive_int(
            "decoder_sequence_length", decoder_sequence_length
        )
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

import keras
import keras_hub
import numpy as np
from keras import ops

from keras_tfm.models.preprocessor import PackedLength, Preprocessor
from keras_tfm.models.tokenizer_attachment import named_token_id


@keras.saving.register_keras_serializable(package="keras_tfm")
class TextClassifierPreprocessor(Preprocessor):
    """Strings to "[CLS] text [SEP]" token ids, for an encoder's tasks.

    Each text is tokenized, cut to `sequence_length - 2` tokens, framed by
    "[CLS]" and "[SEP]" and padded with "[PAD]" to `sequence_length`
    (keras-hub's `StartEndPacker`). `EncoderClassifier` and
    `SentenceEncoder` read text through it: the packing of BERT's sequence
    classification and of sentence-transformers' encoders is the same.

    Called eagerly it runs in Python (no TensorFlow needed); it also maps a
    `tf.data.Dataset` of strings (`dataset.map(preprocessor)`, TensorFlow
    ops, the same ids), labels and sample weights passing through untouched.

    Args:
        tokenizer: a keras-hub tokenizer with "[CLS]", "[SEP]" and "[PAD]"
            (a `WordPieceTokenizer` from `train_word_piece_tokenizer`, or a
            BERT tokenizer with `cls_token_id`, ...).
        sequence_length: the length every row is cut or padded to, [CLS]
            and [SEP] included (at least 3).

    Call arguments:
        x: a string, or a batch (list, array or tensor) of strings.
        y: optional labels, returned as they are.
        sample_weight: optional weights, returned as they are.

    Returns:
        `x` as a dict with "token_ids" (int32) and "padding_mask" (bool, True
        at real tokens), each (batch, sequence_length) or (sequence_length,)
        for one string; with `y` (and `sample_weight`), the tuple
        `(x, y[, sample_weight])`, as `keras.utils.pack_x_y_sample_weight`.

    Example:
    >>> import keras_hub
    >>> tokenizer = keras_hub.tokenizers.WordPieceTokenizer(
    ...     vocabulary=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "the", "cat", "a",
    ...                 "dog", "ran"],
    ...     special_tokens=["[PAD]", "[CLS]", "[SEP]"], oov_token="[UNK]")
    >>> preprocessor = keras_tfm.models.TextClassifierPreprocessor(
    ...     tokenizer, sequence_length=6)
    >>> x = preprocessor(["the cat", "a dog ran"])
    >>> x["token_ids"].shape, x["padding_mask"].numpy().sum(axis=1).tolist()
    (TensorShape([2, 6]), [4, 5])
    >>> x["token_ids"].numpy()[1].tolist()  # [CLS] a dog ran [SEP] [PAD]
    [2, 6, 7, 8, 3, 0]

    Inside `tf.data`:
    >>> import tensorflow as tf
    >>> data = tf.data.Dataset.from_tensor_slices((["the cat"], [1])).batch(1)
    >>> x, y = next(iter(data.map(preprocessor)))
    >>> x["token_ids"].shape, y.numpy().tolist()
    (TensorShape([1, 6]), [1])
    """

    sequence_length = PackedLength(
        "packer", minimum=3, why=" (room for [CLS], a token and [SEP])"
    )

    def __init__(self, tokenizer, sequence_length=512, **kwargs):
        super().__init__(tokenizer, **kwargs)
        self.sequence_length = sequence_length
        self.packer = None
        # The packer is made in `build`, once the tokenizer has its
        # vocabulary (a loaded `.keras` file restores it after construction).
        self.built = False

    def build(self, input_shape=None):
        ids = {
            token: named_token_id(self.tokenizer, attribute, token)
            for attribute, token in (
                ("cls_token_id", "[CLS]"),
                ("sep_token_id", "[SEP]"),
                ("pad_token_id", "[PAD]"),
            )
        }
        missing = [token for token, i in ids.items() if i is None]
        if missing:
            raise ValueError(
                f"`tokenizer` must have the tokens {missing} to pack a text as "
                f'"[CLS] text [SEP]" padded with "[PAD]". Received: a '
                f"{type(self.tokenizer).__name__} without them"
            )
        self.packer = keras_hub.layers.StartEndPacker(
            sequence_length=self.sequence_length,
            start_value=ids["[CLS]"],
            end_value=ids["[SEP]"],
            pad_value=ids["[PAD]"],
            return_padding_mask=True,
            name="packer",
        )
        self.built = True

    def build_from_config(self, config):
        # Loading a file builds layers before their assets are restored;
        # the packer waits for the first call, when the vocabulary is there.
        pass

    def call(self, x, y=None, sample_weight=None):
        if self.packer is None:  # a loaded file marks the layer built
            self.build()
        token_ids, padding_mask = self.packer(self.tokenizer(x))
        x = {"token_ids": token_ids, "padding_mask": padding_mask}
        return keras.utils.pack_x_y_sample_weight(x, y, sample_weight)

    def pack_texts(self, texts, trim=True):
        """A list of strings as NumPy inputs, run on the host.

        The tokenizer reads the Python strings themselves (a tokenizer with
        its own Python normalization, as `HFBertTokenizer`, applies it).

        Args:
            texts: a list of strings.
            trim: cut the padding after the longest text (at least 3
                columns); padding changes no output (it is masked).

        Returns:
            A dict with "token_ids" (int32) and "padding_mask" (bool), each
            (len(texts), length).
        """
        x = self(list(texts))
        x = {key: ops.convert_to_numpy(value) for key, value in x.items()}
        if trim:
            length = max(3, int(x["padding_mask"].sum(axis=1).max()))
            x = {key: value[:, :length] for key, value in x.items()}
        x["token_ids"] = x["token_ids"].astype(np.int32)
        return x

    def get_config(self):
        config = super().get_config()
        config["sequence_length"] = self.sequence_length
        return config

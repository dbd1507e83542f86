import keras
import keras_hub
import numpy as np

from keras_tfm.data.masked_lm_masker import MaskedLMMasker
from keras_tfm.models.preprocessor import PackedLength, Preprocessor
from keras_tfm.models.tokenizer_attachment import named_token_id


@keras.saving.register_keras_serializable(package="keras_tfm")
class MaskedLMPreprocessor(Preprocessor):
    """Strings to masked-language-model batches, and texts with "[MASK]" to ids.

    Called as a layer (eagerly, or as `dataset.map(preprocessor)`), it
    packs each text as "[CLS] text [SEP]" (without either where the
    tokenizer lacks it), padded to `sequence_length`, and masks it with a
    `MaskedLMMasker` (BERT's 80/10/10 recipe, new masks at every call;
    TensorFlow ops in `tf.data` and on the TensorFlow backend, Python on
    the others, which need no TensorFlow): `MaskedLanguageModel.fit` then
    trains on raw strings. `encode_with_masks` is the host-side
    reading of a text whose "[MASK]" placeholders are to be filled
    (`fill_mask`, which needs no TensorFlow).

    Args:
        tokenizer: a keras-hub tokenizer with a "[MASK]" token (optional
            "[CLS]", "[SEP]", "[PAD]"; padding is id 0 without "[PAD]").
        sequence_length: the length every row is cut or padded to.
        mask_selection_rate: probability that a token is selected.
        mask_selection_length: prediction slots per sequence.
        mask_token_rate: share of selections replaced by "[MASK]".
        random_token_rate: share of selections replaced by a random id.

    Call arguments:
        x: a batch (list, array or tensor) of strings.
        y: must be None: the labels are the masked tokens.
        sample_weight: must be None.

    Returns:
        `(x, y, sample_weight)` as `MaskedLMMasker` returns them.

    Example:
    >>> import keras_hub
    >>> tokenizer = keras_hub.tokenizers.WordPieceTokenizer(
    ...     vocabulary=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the",
    ...                 "cat", "dog", "sat", "on", "mat", "."],
    ...     special_tokens=["[PAD]", "[CLS]", "[SEP]", "[MASK]"],
    ...     oov_token="[UNK]", lowercase=True)
    >>> preprocessor = keras_tfm.models.MaskedLMPreprocessor(
    ...     tokenizer, sequence_length=8, mask_selection_length=2)
    >>> x, y, w = preprocessor(["the cat sat on the mat ."])
    >>> x["token_ids"].shape, x["mask_positions"].shape, y.shape
    (TensorShape([1, 8]), TensorShape([1, 2]), TensorShape([1, 2]))
    >>> ids, positions = preprocessor.encode_with_masks("The [MASK] sat.")
    >>> ids.tolist(), positions.tolist()
    ([2, 5, 4, 8, 11, 3], [2])
    """

    sequence_length = PackedLength("packer")

    def __init__(
        self,
        tokenizer,
        sequence_length=512,
        mask_selection_rate=0.15,
        mask_selection_length=96,
        mask_token_rate=0.8,
        random_token_rate=0.1,
        **kwargs,
    ):
        super().__init__(tokenizer, **kwargs)
        self.sequence_length = sequence_length
        self.masker_config = {
            "mask_selection_rate": mask_selection_rate,
            "mask_selection_length": mask_selection_length,
            "mask_token_rate": mask_token_rate,
            "random_token_rate": random_token_rate,
        }
        self.packer = self.masker = None
        # The special ids are read in `build`, once the tokenizer has its
        # vocabulary (a loaded `.keras` file restores it after construction).
        self.built = False

    def build(self, input_shape=None):
        tokenizer = self.tokenizer
        self.mask_token_id = named_token_id(tokenizer, "mask_token_id", "[MASK]")
        self.cls_token_id = named_token_id(tokenizer, "cls_token_id", "[CLS]")
        self.sep_token_id = named_token_id(tokenizer, "sep_token_id", "[SEP]")
        pad_id = named_token_id(tokenizer, "pad_token_id", "[PAD]")
        self.pad_token_id = 0 if pad_id is None else pad_id
        self.packer = keras_hub.layers.StartEndPacker(
            sequence_length=self.sequence_length,
            start_value=self.cls_token_id,
            end_value=self.sep_token_id,
            pad_value=self.pad_token_id,
            name="packer",
        )
        if self.mask_token_id is not None:
            special = (self.cls_token_id, self.sep_token_id, self.mask_token_id)
            self.masker = MaskedLMMasker(
                vocabulary_size=tokenizer.vocabulary_size(),
                mask_token_id=self.mask_token_id,
                unselectable_token_ids=[i for i in special if i is not None],
                padding_id=self.pad_token_id,
                **self.masker_config,
            )
        self.built = True

    def build_from_config(self, config):
        # Loading a file builds layers before their assets are restored;
        # the packer waits for the first call, when the vocabulary is there.
        pass

    def _require_mask_token(self):
        if self.packer is None:  # a loaded file marks the layer built
            self.build()
        if self.mask_token_id is None:
            raise ValueError(
                'The tokenizer has no "[MASK]" token. Received: a '
                f"{type(self.tokenizer).__name__} without one"
            )

    def call(self, x, y=None, sample_weight=None):
        if y is not None or sample_weight is not None:
            raise ValueError(
                "A masked language model's labels are its masked tokens: pass "
                "texts only. Received: y or sample_weight that is not None"
            )
        self._require_mask_token()
        return self.masker(self.packer(self.tokenizer(x)))

    def special_token_ids(self):
        """The ids of a WordPiece tokenizer's special tokens, [UNK] included."""
        tokenizer = self.tokenizer
        if not isinstance(tokenizer, keras_hub.tokenizers.WordPieceTokenizer):
            return set()
        tokens = set(tokenizer.special_tokens or ())
        tokens.update(tokenizer.get_config().get("special_tokens") or ())
        tokens.add(tokenizer.oov_token)
        vocabulary = tokenizer.get_vocabulary()
        return {i for i, token in enumerate(vocabulary) if token in tokens}

    def encode_with_masks(self, text, mask_token="[MASK]"):
        """`(ids, positions)`: "[CLS] text [SEP]" with each `mask_token` as
        the "[MASK]" id, and where those are.

        The text is tokenized piece by piece between the placeholders (a
        tokenizer that splits punctuation would cut "[MASK]" into "[",
        "mask", "]"). Raises a ValueError for a text without a placeholder
        or longer than `sequence_length`.
        """
        self._require_mask_token()
        parts = text.split(mask_token)
        if len(parts) < 2:
            raise ValueError(
                f"The text must contain at least one {mask_token}. "
                f"Received: text={text!r}"
            )
        pieces = self.token_lists(parts)
        ids = [] if self.cls_token_id is None else [self.cls_token_id]
        for i, piece in enumerate(pieces):
            if i:
                ids.append(self.mask_token_id)
            ids.extend(int(t) for t in piece)
        ids += [] if self.sep_token_id is None else [self.sep_token_id]
        if len(ids) > self.sequence_length:
            raise ValueError(
                f"The text is {len(ids)} tokens long, more than "
                f"sequence_length={self.sequence_length}. "
                f"Received: text={text[:80]!r}"
            )
        ids = np.asarray(ids, "int32")
        return ids, np.flatnonzero(ids == self.mask_token_id)

    def get_config(self):
        config = super().get_config()
        config.update({"sequence_length": self.sequence_length, **self.masker_config})
        return config

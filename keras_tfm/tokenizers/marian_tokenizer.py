"""keras-hub's SentencePieceTokenizer with Marian's vocab.json ids."""

import json
import os

import keras
import keras_hub
import numpy as np
import sentencepiece

from keras_tfm._optional import python_ids
from keras_tfm._optional import tensorflow as tf
from keras_tfm._optional import tensorflow_text as tf_text

SPIECE_UNDERLINE = "\u2581"
SOURCE_FILE, TARGET_FILE, VOCABULARY_FILE = "source.spm", "target.spm", "vocab.json"


def _read_proto(proto):
    if proto is None or isinstance(proto, bytes):
        return proto
    if isinstance(proto, str) and len(proto) > 2048:
        return proto  # base64, as keras-hub serializes a proto
    if isinstance(proto, str | os.PathLike):
        with open(proto, "rb") as file:
            return file.read()
    raise ValueError(
        "A SentencePiece proto must be bytes or a file path. Received: "
        f"{type(proto).__name__}"
    )


def _split_language_code(text):
    """`MarianTokenizer.remove_language_code`: ">>fr<< a" -> ([">>fr<<"], " a")."""
    if text.startswith(">>") and (end := text.find("<<")) != -1:
        return [text[: end + 2]], text[end + 2 :]
    return [], text


@keras.saving.register_keras_serializable(package="keras_tfm")
class MarianTokenizer(keras_hub.tokenizers.SentencePieceTokenizer):
    """A Marian (opus-mt) tokenizer: two SentencePiece models and vocab.json.

    A Marian checkpoint splits source text with source.spm and target text
    with target.spm, and numbers the pieces with its own joint vocabulary
    (vocab.json), not with either SentencePiece model's ids; a piece not in
    vocab.json is "<unk>", and every sequence ends with "</s>". This is
    keras-hub's `SentencePieceTokenizer` on the source model, asked for
    pieces (strings, which keep an unknown character's surface as
    HuggingFace's `MarianTokenizer` sees it), with the pieces looked up in
    vocab.json (in Python eagerly, without TensorFlow; in a `tf.lookup`
    table inside tf.data and tf.function). A leading language code such as
    ">>fra<<" (multi-target models) is kept whole, as `MarianTokenizer`
    keeps it. Moses punctuation
    normalization (applied by `MarianTokenizer` only where sacremoses is
    installed) is not applied.

    `detokenize` maps ids to pieces and joins them with the target model,
    without "</s>", "<pad>" and "<unk>": `MarianTokenizer.decode(ids,
    skip_special_tokens=True)`. `start_token_id` is the pad id, Marian's
    decoder start token; `end_token_id` is "</s>".

    Args:
        proto: the source SentencePiece model (path or bytes).
        target_proto: the target SentencePiece model (path or bytes); by
            default the source one.
        vocabulary: dict piece -> id (vocab.json's contents) or its path.
        unk_token, eos_token, pad_token: those tokens of the vocabulary.
        **kwargs: other `keras_hub.tokenizers.Tokenizer` arguments (not
            `dtype`, `sequence_length`, `add_bos` or `add_eos`).

    Example:
    >>> folder = FIXTURES / "tiny_marian_hf"
    >>> tokenizer = MarianTokenizer(folder / "source.spm",
    ...     folder / "target.spm", folder / "vocab.json")
    >>> ids = tokenizer("Das ist gut.")
    >>> int(ids[-1]) == tokenizer.end_token_id == 0
    True
    >>> tokenizer.start_token_id == tokenizer.token_to_id("<pad>")
    True
    """

    def __init__(
        self,
        proto=None,
        target_proto=None,
        vocabulary=None,
        unk_token="<unk>",
        eos_token="</s>",
        pad_token="<pad>",
        **kwargs,
    ):
        kwargs.pop("dtype", None)
        for name in ("sequence_length", "add_bos", "add_eos"):
            value = kwargs.pop(name, None)
            if value:
                raise ValueError(
                    f"MarianTokenizer has no `{name}`: it always appends "
                    f'"</s>" and never pads. Received: {name}={value!r}'
                )
        self.unk_token, self.eos_token, self.pad_token = unk_token, eos_token, pad_token
        self._pieces = None
        self._set_vocabulary(vocabulary)
        self.target_proto = None
        self._set_target_proto(target_proto)
        # Read here, closing the file (keras-hub's set_proto leaves it open).
        proto = _read_proto(proto)
        super().__init__(proto=proto, dtype="string", **kwargs)
        self.file_assets = [SOURCE_FILE, TARGET_FILE, VOCABULARY_FILE]

    # Vocabulary: vocab.json, not the SentencePiece models' own pieces.

    def _set_vocabulary(self, vocabulary):
        if vocabulary is None:
            self._pieces = self._index = None
            self.start_token_id = self.end_token_id = self.pad_token_id = None
            return
        if not isinstance(vocabulary, dict):
            with open(vocabulary, encoding="utf-8") as file:
                vocabulary = json.load(file)
        ids = sorted(vocabulary.values())
        if ids != list(range(len(ids))):
            raise ValueError(
                "The vocabulary's ids must be 0, 1, ..., n - 1 without gaps. "
                f"Received ids from {ids[0]} to {ids[-1]} for {len(ids)} pieces"
            )
        for token in (self.unk_token, self.eos_token, self.pad_token):
            if token not in vocabulary:
                raise ValueError(
                    f"The Marian vocabulary lacks {token!r}. Received "
                    f"{len(vocabulary)} pieces such as {list(vocabulary)[:3]}"
                )
        self._index = dict(vocabulary)
        self._pieces = [None] * len(ids)
        for piece, i in vocabulary.items():
            self._pieces[i] = piece
        self.unk_token_id = self._index[self.unk_token]
        self.end_token_id = self._index[self.eos_token]
        self.pad_token_id = self._index[self.pad_token]
        # Marian decodes from the pad token (config.decoder_start_token_id).
        self.start_token_id = self.pad_token_id
        self._special_ids = {self.unk_token_id, self.end_token_id, self.pad_token_id}
        self._tables = None

    def _set_target_proto(self, target_proto):
        self.target_proto = _read_proto(target_proto)
        self._target_spm = self._target_tf = None
        if self.target_proto is not None:
            self._target_spm = sentencepiece.SentencePieceProcessor(
                model_proto=self.target_proto
            )

    def _target_graph(self):
        """The target model as a TensorFlow Text op, made on first use (the
        Python path has no TensorFlow), eagerly, and kept."""
        if self._target_tf is None:
            with tf.init_scope():
                self._target_tf = tf_text.SentencepieceTokenizer(
                    model=self.target_proto, out_type=tf.string
                )
        return self._target_tf

    def _check_ready(self):
        if self.proto is None or self._pieces is None:
            raise ValueError(
                "MarianTokenizer has no vocabulary: pass `proto` and "
                "`vocabulary` (source.spm and vocab.json). Received: "
                f"proto={'set' if self.proto else None}, vocabulary="
                f"{'set' if self._pieces else None}"
            )

    def vocabulary_size(self):
        self._check_ready()
        return len(self._pieces)

    def get_vocabulary(self):
        self._check_ready()
        return list(self._pieces)

    def id_to_token(self, id):
        self._check_ready()
        if not 0 <= id < len(self._pieces):
            raise ValueError(
                f"`id` must be in [0, {len(self._pieces)}). Received: id={id}"
            )
        return self._pieces[id]

    def token_to_id(self, token):
        self._check_ready()
        if isinstance(token, bytes):
            token = token.decode("utf-8")
        return self._index.get(token, self.unk_token_id)

    def _update_special_token_ids(self):
        # The parent would look the special tokens up in the source model.
        pass

    # Tokenizing: pieces from the source model, ids from vocab.json.

    def _lookup_tables(self):
        if self._tables is None:
            # Made eagerly, outside any tf.data or tf.function graph, and kept.
            with tf.init_scope():
                keys = tf.constant(self._pieces)
                values = tf.range(len(self._pieces), dtype="int32")
                to_id = tf.lookup.StaticHashTable(
                    tf.lookup.KeyValueTensorInitializer(keys, values),
                    self.unk_token_id,
                )
            self._tables = (to_id, keys)
        return self._tables

    def tokenize(self, inputs):
        self._check_ready()
        if self._use_tf_workflow():
            return self._tokenize_tf_ids(inputs)
        if hasattr(inputs, "numpy"):
            inputs = inputs.numpy()
        single = isinstance(inputs, str | bytes) or np.ndim(inputs) == 0
        texts = [inputs] if single else np.asarray(inputs, object).reshape(-1).tolist()
        if single and isinstance(inputs, np.ndarray):
            texts = [inputs.item()]
        rows = []
        for text in texts:
            text = text.decode("utf-8") if isinstance(text, bytes) else str(text)
            code, text = _split_language_code(text)
            pieces = code + list(super().tokenize(text))
            ids = [self.token_to_id(p) for p in pieces] + [self.end_token_id]
            rows.append(np.array(ids, "int32"))
        return rows[0] if single else rows

    def _tokenize_tf_ids(self, inputs):
        inputs = tf.convert_to_tensor(inputs)
        unbatched = inputs.shape.rank == 0
        texts = tf.reshape(inputs, [-1])
        has_code = tf.strings.regex_full_match(texts, r"(?s)>>.*?<<.*")
        code = tf.strings.regex_replace(texts, r"(?s)^(>>.*?<<).*$", r"\1")
        without_code = tf.strings.regex_replace(texts, r"(?s)^>>.*?<<", "")
        rest = tf.where(has_code, without_code, texts)
        self._maybe_initialized_tf()
        pieces = self._sentence_piece.tokenize(rest)
        codes = tf.RaggedTensor.from_row_lengths(
            tf.boolean_mask(code, has_code), tf.cast(has_code, "int64")
        )
        pieces = tf.concat([codes, pieces], axis=1)
        to_id, _ = self._lookup_tables()
        ids = tf.ragged.map_flat_values(to_id.lookup, pieces)
        ends = tf.fill([tf.shape(texts)[0], 1], tf.constant(self.end_token_id, "int32"))
        ids = tf.concat([ids, ends], axis=1)
        return ids[0] if unbatched else ids

    # Detokenizing: ids to vocab.json pieces, joined by the target model.

    def detokenize(self, inputs):
        self._check_ready()
        if self._target_spm is None:
            raise ValueError(
                "MarianTokenizer has no `target_proto` to detokenize with."
            )
        if self._use_tf_workflow():
            return self._detokenize_tf_ids(inputs)
        inputs = python_ids(inputs)
        if isinstance(inputs, int | np.integer):
            inputs = [inputs]
        inputs = list(inputs)
        single = not inputs or np.ndim(inputs[0]) == 0
        rows = [inputs] if single else inputs
        texts = []
        for row in rows:
            ids = [int(i) for i in row if int(i) not in self._special_ids]
            pieces = [self._pieces[i] for i in ids]
            # MarianTokenizer.convert_tokens_to_string: pieces unknown to the
            # target model keep their "▁", which then reads as a space.
            text = self._target_spm.decode_pieces(pieces)
            texts.append(text.replace(SPIECE_UNDERLINE, " ").strip())
        return texts[0] if single else texts

    def _detokenize_tf_ids(self, inputs):
        if not isinstance(inputs, tf.RaggedTensor):
            inputs = tf.convert_to_tensor(inputs)
        unbatched = inputs.shape.rank == 1
        if unbatched:
            inputs = tf.expand_dims(inputs, 0)
        if not isinstance(inputs, tf.RaggedTensor):
            inputs = tf.RaggedTensor.from_tensor(inputs)
        ids = tf.cast(inputs, "int32")
        keep = tf.reduce_all(
            tf.stack([tf.not_equal(ids, i) for i in sorted(self._special_ids)]), 0
        )
        _, pieces = self._lookup_tables()
        ids = tf.ragged.boolean_mask(ids, keep)
        texts = self._target_graph().detokenize(tf.gather(pieces, ids))
        texts = tf.strings.strip(tf.strings.regex_replace(texts, SPIECE_UNDERLINE, " "))
        return texts[0] if unbatched else texts

    # Saving: the two models and vocab.json are assets of the .keras file.

    def save_assets(self, dir_path):
        super().save_assets(dir_path)
        # The parent writes the source model as vocabulary.spm.
        source = os.path.join(dir_path, SOURCE_FILE)
        os.replace(os.path.join(dir_path, "vocabulary.spm"), source)
        with open(os.path.join(dir_path, TARGET_FILE), "wb") as file:
            file.write(self.target_proto)
        with open(os.path.join(dir_path, VOCABULARY_FILE), "w", encoding="utf-8") as f:
            json.dump(self._index, f, ensure_ascii=False)

    def load_assets(self, dir_path):
        self._set_vocabulary(os.path.join(dir_path, VOCABULARY_FILE))
        self._set_target_proto(os.path.join(dir_path, TARGET_FILE))
        self.set_proto(_read_proto(os.path.join(dir_path, SOURCE_FILE)))

    def get_config(self):
        config = super().get_config()
        config.pop("dtype", None)
        config.update(
            {
                "target_proto": None,  # saved as assets, as `proto` is
                "vocabulary": None,
                "unk_token": self.unk_token,
                "eos_token": self.eos_token,
                "pad_token": self.pad_token,
            }
        )
        return config

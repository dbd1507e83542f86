"""SentencePiece BPE vocabularies as llama.cpp tokenizes them.

Llama 2, Mistral v0.1, TinyLlama, Phi-3 and Gemma ship a SentencePiece BPE
model with byte fallback; their GGUF files carry it as
`tokenizer.ggml.model` "llama": each piece with its score (the merge
priority) and type (normal, unknown, control, user-defined, unused, byte).
`sentencepiece_proto` rebuilds the SentencePiece model from those lists
(identity normalization, no whitespace collapsing, the file's
`add_space_prefix` as the dummy prefix), so SentencePiece itself merges
and falls back to bytes as llama.cpp's SPM tokenizer does.

What llama.cpp adds around it (llama-vocab.cpp, `tokenize` with special
tokens parsed), `SentencePieceBPETokenizer` adds too: the special tokens
(control, user-defined and unknown pieces) are cut out of the text first,
longest first, each one id; every piece of text between them is encoded on
its own, so with a space prefix each gets one ("<|end|>\\nHi" is
`<|end|>`, "▁", "\\n", ...). SentencePiece would prefix the whole text
once and never match a control piece.
"""

import os
import re

import keras
import keras_hub
import numpy as np
from keras_hub.src.tokenizers.sentence_piece_tokenizer import VOCAB_FILENAME

from keras_tfm._optional import tensorflow as tf
from keras_tfm.tokenizers.chat_formatting import ChatTemplateMixin

# SentencePiece's (and GGUF's `tokenizer.ggml.token_type`) piece types.
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
# The types llama.cpp matches in text as single tokens.
SPECIAL_TYPES = (UNKNOWN, CONTROL, USER_DEFINED)


def sentencepiece_proto(pieces, scores, types, add_space_prefix=True):
    """A serialized SentencePiece BPE model of a GGUF "llama" vocabulary.

    Args:
        pieces: the token strings ("▁" for a space, "<0x41>" for bytes).
        scores: one float per piece, the merge priority (higher first).
        types: one SentencePiece type per piece (1-6, GGUF's values).
        add_space_prefix: a "▁" before the text (llama.cpp's
            `tokenizer.ggml.add_space_prefix`; Gemma has none).

    Returns:
        The model's bytes, for `SentencePieceBPETokenizer(proto=...)`.

    Example:
    >>> proto = sentencepiece_proto(
    ...     ["<unk>", "▁", "a", "b", "▁a", "ab"], [0, -1, -2, -3, -4, -5],
    ...     [UNKNOWN, NORMAL, NORMAL, NORMAL, NORMAL, NORMAL])
    >>> import sentencepiece
    >>> model = sentencepiece.SentencePieceProcessor(model_proto=proto)
    >>> model.encode("ab", out_type=str)
    ['▁a', 'b']
    """
    from sentencepiece import sentencepiece_model_pb2 as model_pb2

    if not len(pieces) == len(scores) == len(types):
        raise ValueError(
            "A vocabulary needs one score and one type per piece. Received: "
            f"{len(pieces)} pieces, {len(scores)} scores, {len(types)} types"
        )
    unknown = [i for i, kind in enumerate(types) if kind == UNKNOWN]
    if len(unknown) != 1:
        raise ValueError(
            "A SentencePiece vocabulary has exactly one unknown piece (type 2). "
            f"Received: {len(unknown)}"
        )
    model = model_pb2.ModelProto()
    for piece, score, kind in zip(pieces, scores, types, strict=True):
        if kind not in (NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE):
            raise ValueError(
                f"Token types are 1 to 6 (SentencePiece's). Received: {kind!r} "
                f"for piece {piece!r}"
            )
        model.pieces.add(piece=piece, score=float(score), type=int(kind))
    model.trainer_spec.model_type = model_pb2.TrainerSpec.BPE
    model.trainer_spec.vocab_size = len(pieces)
    model.trainer_spec.byte_fallback = BYTE in types
    model.trainer_spec.unk_id = unknown[0]
    model.trainer_spec.bos_id = model.trainer_spec.eos_id = -1
    model.trainer_spec.pad_id = -1
    model.normalizer_spec.name = "identity"
    model.normalizer_spec.add_dummy_prefix = bool(add_space_prefix)
    model.normalizer_spec.remove_extra_whitespaces = False
    model.normalizer_spec.escape_whitespaces = True
    return model.SerializeToString()


@keras.saving.register_keras_serializable(package="keras_tfm")
class SentencePieceBPETokenizer(
    ChatTemplateMixin, keras_hub.tokenizers.SentencePieceTokenizer
):
    """keras-hub's `SentencePieceTokenizer` with llama.cpp's special tokens,
    roles and the checkpoint's chat template.

    Args:
        proto: the SentencePiece model (bytes or a path), e.g.
            `sentencepiece_proto(...)` of a GGUF file's vocabulary.
        unsplittable_tokens: the pieces cut out of the text as single ids before
            SentencePiece runs (see the module docstring); by default the
            model's control, user-defined and unknown pieces.
        bos_token, eos_token, pad_token: the tokens of those roles
            (`start_token_id`, `end_token_id`, `pad_token_id`), or None.
        chat_template: the checkpoint's Jinja2 chat template, used by
            `apply_chat_template`.
        **kwargs: other `keras_hub.tokenizers.SentencePieceTokenizer`
            arguments (`sequence_length`, `dtype`).

    No BOS is added (a chat template writes its `bos_token`). Decoding is
    SentencePiece's: control pieces decode to nothing, as in llama.cpp.

    Example:
    >>> proto = sentencepiece_proto(
    ...     ["<unk>", "<|end|>", "▁", "a", "\\n", "▁a"], [0, 0, -1, -2, -3, -4],
    ...     [UNKNOWN, CONTROL, NORMAL, NORMAL, NORMAL, NORMAL])
    >>> tokenizer = SentencePieceBPETokenizer(proto, eos_token="<|end|>")
    >>> [tokenizer.id_to_token(int(i)) for i in tokenizer("a<|end|>\\na")]
    ['▁a', '<|end|>', '▁', '\\n', 'a']
    >>> tokenizer.detokenize([5, 1])  # control pieces decode to nothing
    'a'
    """

    def __init__(
        self,
        proto=None,
        unsplittable_tokens=None,
        bos_token=None,
        eos_token=None,
        pad_token=None,
        chat_template=None,
        **kwargs,
    ):
        self.unsplittable_tokens = (
            None if unsplittable_tokens is None else list(unsplittable_tokens)
        )
        self._set_roles(bos_token, eos_token, pad_token, chat_template)
        super().__init__(proto=proto, **kwargs)

    def set_proto(self, proto):
        super().set_proto(proto)
        self._splitter = None
        if proto is None:
            return
        if self.unsplittable_tokens is None:
            from sentencepiece import sentencepiece_model_pb2 as model_pb2

            model = model_pb2.ModelProto()
            model.ParseFromString(self.proto)
            self.unsplittable_tokens = [
                p.piece for p in model.pieces if p.type in SPECIAL_TYPES
            ]
        missing = [
            t for t in self.unsplittable_tokens if t not in self._token_to_id_map
        ]
        if missing:
            raise ValueError(
                f"Special tokens must be pieces of the model. Received: {missing[:4]}"
            )
        specials = sorted(self.unsplittable_tokens, key=len, reverse=True)
        if specials:
            self._splitter = re.compile("(" + "|".join(map(re.escape, specials)) + ")")

    def load_assets(self, dir_path):
        # keras-hub's reads the file without closing it.
        with open(os.path.join(dir_path, VOCAB_FILENAME), "rb") as file:
            self.set_proto(file.read())

    def encode_texts(self, texts):
        """Token ids of each text: special tokens cut out, the rest encoded
        by SentencePiece piece by piece (see the module docstring)."""
        self._maybe_initialized_spm()
        model = self._sentence_piece_spm
        encoded = []
        for text in texts:
            parts = [text] if self._splitter is None else self._splitter.split(text)
            ids = []
            for index, part in enumerate(parts):
                if index % 2:  # a special token (the split's captured group)
                    ids.append(self._token_to_id_map[part])
                elif part:
                    ids.extend(model.Encode(part))
            encoded.append(ids)
        return encoded

    def _tokenize_spm(self, inputs):
        texts, batched = _as_texts(inputs)
        tokens = self.encode_texts(texts)
        return self._shaped(tokens, batched)

    def _tokenize_tf(self, inputs):
        # SentencePiece's TensorFlow op cannot cut the special tokens out
        # first: in tf.data and tf.function the same Python encoding runs.
        inputs = tf.convert_to_tensor(inputs)
        unbatched = inputs.shape.rank == 0
        if unbatched:
            inputs = tf.expand_dims(inputs, 0)

        def encode(strings):
            texts = [s.decode("utf-8") for s in strings.numpy().reshape(-1)]
            pieces = self.encode_texts(texts)
            values = np.array([x for ids in pieces for x in ids], "int64")
            return values, np.array([len(ids) for ids in pieces], "int64")

        values, lengths = tf.py_function(encode, [inputs], [tf.int64, tf.int64])
        values.set_shape([None])
        lengths.set_shape([None])
        tokens = tf.RaggedTensor.from_row_lengths(
            tf.cast(values, self.compute_dtype), lengths
        )
        if self.sequence_length:
            tokens = tokens.to_tensor(
                default_value=getattr(self, "pad_token_id", None) or 0,
                shape=(None, self.sequence_length),
            )
        return tokens[0] if unbatched else tokens

    def _shaped(self, tokens, batched):
        """keras-hub's output shapes for `tokens` (lists of ids)."""
        if self.sequence_length:
            pad = getattr(self, "pad_token_id", None) or 0
            tokens = [
                ids[: self.sequence_length]
                + [pad] * (self.sequence_length - len(ids[: self.sequence_length]))
                for ids in tokens
            ]
            tokens = np.array(tokens, self.compute_dtype)
        if not batched:
            return np.array(tokens[0], self.compute_dtype)
        return tokens

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "unsplittable_tokens": self.unsplittable_tokens,
                "bos_token": self.bos_token,
                "eos_token": self.eos_token,
                "pad_token": self.pad_token,
                "chat_template": self.chat_template,
            }
        )
        return config


def _as_texts(inputs):
    """`(list of str, batched)` of a string, a list of strings or an array."""
    if isinstance(inputs, (str, bytes)):
        inputs, batched = [inputs], False
    elif isinstance(inputs, (list, tuple)):
        inputs, batched = list(inputs), True
    else:
        array = keras.ops.convert_to_numpy(inputs)
        batched = array.ndim > 0
        inputs = array.reshape(-1).tolist()
    texts = [t.decode("utf-8") if isinstance(t, bytes) else t for t in inputs]
    if not all(isinstance(t, str) for t in texts):
        raise ValueError(f"Inputs must be strings. Received: {inputs!r}")
    return texts, batched

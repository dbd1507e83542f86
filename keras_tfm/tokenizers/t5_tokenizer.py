"""T5's tokenizer: keras-hub's SentencePieceTokenizer with "</s>" appended.

A T5 checkpoint ships its SentencePiece unigram model as spiece.model and/or
as HuggingFace's tokenizer.json (the same pieces and scores, as a
`tokenizers` Unigram model). Either becomes one SentencePiece model proto
here, with T5's sentinels "<extra_id_0>" ... appended as user-defined pieces
in HuggingFace's order (the last sentinel first), so that tokenizing runs as
a TensorFlow op (inside tf.data, tf.function and exported graphs) and the
ids are HuggingFace's `T5Tokenizer` ids.
"""

import base64
import json
import re
from pathlib import Path

import keras
import keras_hub
import numpy as np

from keras_tfm._optional import is_tf_tensor, python_ids
from keras_tfm._optional import tensorflow as tf

PAD, EOS, UNK = "<pad>", "</s>", "<unk>"
SENTINEL = "<extra_id_{}>"


def _model_pb2():
    # Imported when a proto is built: it needs protobuf, which a JAX-only
    # install may not have.
    from sentencepiece import sentencepiece_model_pb2

    return sentencepiece_model_pb2


# HuggingFace splits T5 text on Unicode whitespace (`WhitespaceSplit`) and
# splits sentinels off before that; SentencePiece would keep a tab (with an
# identity normalization) and a "▁" before a sentinel. These rewrites,
# in RE2 (TensorFlow) and Python syntax, make its input what HuggingFace's
# pieces come from: whitespace is " ", none before a sentinel, and one after
# (a sentinel that starts the text still gets SentencePiece's leading "▁").
_WHITESPACE = (
    r"[\t-\r \x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}"
    r"\x{205F}\x{3000}]",
    "[\t-\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]",
)
_SENTINEL_AFTER_SPACES = (r" +(<extra_id_[0-9]+>)",) * 2
_SENTINEL_BEFORE_TEXT = (r"(<extra_id_[0-9]+>)([^ ])",) * 2
# (RE2 pattern, Python pattern), replacement (the same in both syntaxes).
_REWRITES = (
    (_WHITESPACE, " "),
    (_SENTINEL_AFTER_SPACES, r"\1"),
    (_SENTINEL_BEFORE_TEXT, r"\1 \2"),
)


def sentinel_tokens(count):
    """T5's sentinels in id order: "<extra_id_{count - 1}>" first, "<extra_id_0>" last.

    >>> sentinel_tokens(2)
    ['<extra_id_1>', '<extra_id_0>']
    """
    return [SENTINEL.format(i) for i in reversed(range(count))]


def spiece_proto(path, extra_ids=0):
    """The bytes of spiece.model with `extra_ids` sentinels appended."""
    model_pb2 = _model_pb2()
    model = model_pb2.ModelProto()
    model.ParseFromString(Path(path).read_bytes())
    present = {piece.piece for piece in model.pieces}
    for token in sentinel_tokens(extra_ids):
        if token not in present:
            model.pieces.add(
                piece=token,
                score=0.0,
                type=model_pb2.ModelProto.SentencePiece.USER_DEFINED,
            )
    return model.SerializeToString()


def plain_spiece_proto(proto):
    """`(spiece.model bytes, extra_ids)`: `proto` without its trailing sentinels,
    as a T5 checkpoint stores it (transformers appends `extra_ids` again)."""
    model = _model_pb2().ModelProto()
    model.ParseFromString(proto)
    count = 0
    while count < len(model.pieces) and model.pieces[
        len(model.pieces) - 1 - count
    ].piece == SENTINEL.format(count):
        count += 1
    del model.pieces[len(model.pieces) - count :]
    left = [p.piece for p in model.pieces if p.piece.startswith("<extra_id_")]
    if left:
        raise ValueError(
            "The sentinels must be the last pieces, in T5's order (the last "
            f"sentinel first), to be saved as spiece.model. Received {left[:3]} "
            "elsewhere"
        )
    return model.SerializeToString(), count


def _precompiled_charsmap(normalizer, path):
    """The SentencePiece normalization map of tokenizer.json's `normalizer`
    (None, `Precompiled`, or a `Sequence` with one and whitespace cleanup)."""
    steps = [] if normalizer is None else [normalizer]
    if normalizer is not None and normalizer.get("type") == "Sequence":
        steps = normalizer.get("normalizers", [])
    charsmap = b""
    for step in steps:
        kind = step.get("type")
        if kind == "Precompiled":
            charsmap = base64.b64decode(step.get("precompiled_charsmap") or "")
        elif not (kind == "Replace" and step.get("content") == " "):
            raise ValueError(
                "Only SentencePiece normalizers (Precompiled, and Replace of "
                f"repeated spaces) are supported. Received: {kind!r} in {path}"
            )
    return charsmap


def unigram_proto(path):
    """A SentencePiece model proto (bytes) from a T5 tokenizer.json.

    Its `Unigram` model's pieces and scores in id order; "<unk>" unknown,
    the other special added tokens control pieces ("<pad>", "</s>"), except
    the sentinels, which are user-defined (matched in the text, as
    HuggingFace matches them); its `Precompiled` normalizer's map.
    """
    spec = json.loads(Path(path).read_text(encoding="utf-8"))
    model = spec.get("model") or {}
    if model.get("type") != "Unigram":
        raise ValueError(
            "A T5 tokenizer.json must hold a SentencePiece Unigram model. "
            f"Received: model type {model.get('type')!r} in {path}"
        )
    special = {t["content"] for t in spec.get("added_tokens", []) if t.get("special")}
    model_pb2 = _model_pb2()
    kinds = model_pb2.ModelProto.SentencePiece
    unk_id = model.get("unk_id")
    proto = model_pb2.ModelProto()
    for i, (piece, score) in enumerate(model["vocab"]):
        kind = kinds.NORMAL
        if i == unk_id:
            kind = kinds.UNKNOWN
        elif piece.startswith("<extra_id_"):
            kind = kinds.USER_DEFINED
        elif piece in special:
            kind = kinds.CONTROL
        proto.pieces.add(piece=piece, score=score, type=kind)
    pieces = [piece for piece, _ in model["vocab"]]
    trainer = proto.trainer_spec
    trainer.model_type = model_pb2.TrainerSpec.UNIGRAM
    trainer.vocab_size = len(pieces)
    trainer.unk_id = -1 if unk_id is None else unk_id
    trainer.bos_id = -1
    trainer.eos_id = pieces.index(EOS) if EOS in pieces else -1
    trainer.pad_id = pieces.index(PAD) if PAD in pieces else -1
    normalizer = proto.normalizer_spec
    charsmap = _precompiled_charsmap(spec.get("normalizer"), path)
    normalizer.name = "nmt_nfkc" if charsmap else "identity"
    normalizer.precompiled_charsmap = charsmap
    normalizer.add_dummy_prefix = True
    normalizer.remove_extra_whitespaces = True
    normalizer.escape_whitespaces = True
    return proto.SerializeToString()


@keras.saving.register_keras_serializable(package="keras_tfm")
class T5Tokenizer(keras_hub.tokenizers.SentencePieceTokenizer):
    """T5's SentencePiece tokenizer: every sequence ends with "</s>".

    keras-hub's `SentencePieceTokenizer` with `add_eos=True`. Build the proto
    with `spiece_proto` (spiece.model and the sentinels) or `unigram_proto`
    (tokenizer.json). "<pad>" is the decoder's start token (`start_token_id`,
    also `pad_token_id`), "</s>" the end (`end_token_id`). `detokenize` drops
    "<pad>" and "</s>" (HuggingFace's `skip_special_tokens=True` drops the
    sentinels too; these are kept).

    Args:
        proto: the SentencePiece model, as bytes or a file path.
        **kwargs: other `keras_hub.tokenizers.SentencePieceTokenizer`
            arguments (not `add_bos` or `add_eos`).

    Example:
    >>> folder = FIXTURES / "tiny_t5_hf"
    >>> tokenizer = T5Tokenizer(spiece_proto(folder / "spiece.model", 4))
    >>> ids = tokenizer("Das ist gut.")
    >>> int(ids[-1]) == tokenizer.end_token_id == 1
    True
    >>> tokenizer.start_token_id, tokenizer.vocabulary_size()
    (0, 204)
    """

    def __init__(self, proto=None, **kwargs):
        for name in ("add_bos", "add_eos"):
            value = kwargs.pop(name, None)
            if value is not None and value != (name == "add_eos"):
                raise ValueError(
                    f'T5Tokenizer always appends "</s>" and never "<s>". '
                    f"Received: {name}={value!r}"
                )
        super().__init__(proto=proto, add_bos=False, add_eos=True, **kwargs)

    def tokenize(self, inputs):
        return super().tokenize(self._clean(inputs))

    def detokenize(self, inputs):
        # A T5 embedding has rows past the tokenizer (32128 for 32100 tokens):
        # those ids have no piece, and are dropped, as transformers drops them.
        size = self.vocabulary_size()
        if is_tf_tensor(inputs) or self._use_tf_workflow():
            ids = inputs
            if not isinstance(ids, tf.RaggedTensor):
                ids = tf.convert_to_tensor(ids)
                if ids.shape.rank == 0:
                    ids = tf.reshape(ids, [1])
                if ids.shape.rank == 2:
                    ids = tf.RaggedTensor.from_tensor(ids)
            keep = ids < size
            if isinstance(ids, tf.RaggedTensor):
                ids = tf.ragged.boolean_mask(ids, keep)
            else:
                ids = tf.boolean_mask(ids, keep)
            return super().detokenize(ids)
        return super().detokenize(_drop_ids(inputs, size))

    def _clean(self, inputs):
        """`inputs` with `_REWRITES` applied, as tensors or as Python strings."""
        if self._use_tf_workflow() or is_tf_tensor(inputs):
            inputs = tf.convert_to_tensor(inputs)
            for (pattern, _), replacement in _REWRITES:
                inputs = tf.strings.regex_replace(inputs, pattern, replacement)
            return inputs
        return _map_text(inputs, _clean_python)

    def _update_special_token_ids(self):
        super()._update_special_token_ids()
        self.pad_token_id = self.token_to_id(PAD)
        self.end_token_id = self.token_to_id(EOS)
        self.start_token_id = self.pad_token_id  # T5 decodes from "<pad>"

    def get_config(self):
        config = super().get_config()
        config.pop("add_bos", None)
        config.pop("add_eos", None)
        return config


def _clean_python(text):
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    for (_, pattern), replacement in _REWRITES:
        text = re.sub(pattern, replacement, text)
    return text


def _map_text(inputs, fn):
    """`fn` on each string of a string, bytes, list or array of them."""
    if isinstance(inputs, str | bytes):
        return fn(inputs)
    if isinstance(inputs, np.ndarray):
        return np.vectorize(fn, otypes=[object])(inputs).astype(str)
    if isinstance(inputs, list | tuple):
        return [_map_text(x, fn) for x in inputs]
    raise ValueError(
        "`inputs` must be a string, a list of strings or a string array or "
        f"tensor. Received: type(inputs)={type(inputs).__name__}"
    )


def _drop_ids(ids, size):
    """`ids` (an id, a list of ids or of lists, an array) without ids >= `size`."""
    ids = python_ids(ids)
    if isinstance(ids, int | np.integer):
        return [int(ids)] if ids < size else []
    if ids and not isinstance(ids[0], int | np.integer):
        return [_drop_ids(row, size) for row in ids]
    return [int(i) for i in ids if i < size]

"""A tokenizer's encode and decode as TensorFlow ops, for exported graphs.

WordPiece tokenizers (keras-hub's, and `HFBertTokenizer`) already run in
TensorFlow inside a `tf.function`, with the ids of their Python calls;
byte-level BPE goes through `byte_pair_graph`; `T5Tokenizer` is
tensorflow-text's SentencePiece op both ways. Detokenizing: BPE in
`byte_pair_graph`, WordPiece's rejoin in `word_piece_graph`.
"""

import keras_hub
import tensorflow as tf

from keras_tfm.export import byte_pair_graph, word_piece_graph
from keras_tfm.tokenizers.t5_tokenizer import T5Tokenizer

# What Python's str.strip() removes, as RE2 spells it.
_STRIP = r"^[\t\n\x0B\f\r\x1C-\x1F\x{85}\p{Z}]+|[\t\n\x0B\f\r\x1C-\x1F\x{85}\p{Z}]+$"


def is_byte_pair(tokenizer):
    return isinstance(tokenizer, keras_hub.tokenizers.BytePairTokenizer)


def tokenize(tokenizer, texts):
    """Ragged int32 ids (batch, tokens) of 1-D string `texts`."""
    if is_byte_pair(tokenizer):
        return byte_pair_graph.tokenize(tokenizer, texts)
    ids = tokenizer(texts)
    if not isinstance(ids, tf.RaggedTensor):
        ids = tf.RaggedTensor.from_tensor(ids)
    return tf.cast(ids, tf.int32)


def detokenize(tokenizer, ids):
    """1-D strings of ragged int `ids` (batch, tokens)."""
    if is_byte_pair(tokenizer):
        return byte_pair_graph.detokenize(tokenizer, ids)
    if isinstance(tokenizer, keras_hub.tokenizers.WordPieceTokenizer):
        return word_piece_graph.detokenize(tokenizer, ids)
    if isinstance(tokenizer, T5Tokenizer):  # tensorflow-text's SentencePiece op
        return tokenizer.detokenize(ids)
    raise ValueError(
        "Only byte-level BPE, WordPiece and T5 tokenizers detokenize inside an "
        f"exported graph. Received: {type(tokenizer).__name__}"
    )


def strip(texts):
    """Python's `str.strip()` of 1-D strings."""
    return tf.strings.regex_replace(texts, _STRIP, "")

"""Byte-level BPE tokenization in TensorFlow ops, equal to the Python tokenizer.

keras-hub's `BytePairTokenizer` runs the `tokenizers` library in Python
calls and an approximation of its pre-split in `tf.function`s (RE2 has no
lookahead); `ByteLevelBPETokenizer` runs `tokenizers` through a
`py_function`, which a SavedModel cannot hold. Here the pre-split is exact
in RE2 and the merges are keras-hub's TensorFlow ones (its hash tables, its
cache), so an exported graph gives the ids of the Python API.

The one lookahead, `\\s+(?!\\S)`: a run of whitespace before a
non-space character gives all but its last character to that alternative
(the last one then starts the next piece). A marker is written before that
last character, the text is cut at the markers, and each part is split by
the pattern without the lookahead, which then never applies. In Llama 3's
pattern `\\s*[\\r\\n]+` comes first, so there a run is cut only when its
last two characters are not line breaks.

`\\s` in `tokenizers` (Oniguruma) is Unicode whitespace; in RE2 it is
ASCII, so the patterns spell it out.
"""

import re

import tensorflow as tf
import tensorflow_text as tf_text

WS = r"[\t\n\x0B\f\r\x{85}\p{Z}]"
NOT_WS = r"[^\t\n\x0B\f\r\x{85}\p{Z}]"
WS_NOT_BREAK = r"[\t\x0B\f\x{85}\p{Z}]"
# Never in text a tokenizer is given (a Unicode noncharacter); such a
# character in the input is dropped.
MARK = "\uffff"

# GPT-2's byte-level pattern (`tokenizers`' ByteLevel regex) without its
# `\s+(?!\S)` alternative, and where that alternative would cut.
GPT2_PIECES = (
    (r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+")
    .replace(r"[^\s", r"[^\t\n\x0B\f\r\x{85}\p{Z}")
    .replace(r"\s+", WS + "+")
)
GPT2_CUT = (f"({WS})({WS}{NOT_WS})", f"\\1{MARK}\\2")

# Llama 3's (keras-hub's `SPLIT_PATTERN_TOKENIZERS`), likewise.
LLAMA3_PIECES = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?"
    r"[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+"
)
LLAMA3_PIECES = (
    LLAMA3_PIECES.replace(r"[^\s", r"[^\t\n\x0B\f\r\x{85}\p{Z}")
    .replace(r"\s*", WS + "*")
    .replace(r"\s+", WS + "+")
)
LLAMA3_CUT = (f"({WS_NOT_BREAK})({WS_NOT_BREAK}{NOT_WS})", f"\\1{MARK}\\2")


def _split_flat(pieces, pattern, cut):
    """Each string of the 1-D `pieces` split into words: ragged (pieces, words)."""
    marked = tf.strings.regex_replace(pieces, cut[0], cut[1])
    parts = tf.strings.split(marked, sep=MARK)
    words = tf_text.regex_split(parts.flat_values, pattern, pattern)
    return tf.RaggedTensor.from_row_splits(words, parts.row_splits).merge_dims(1, 2)


def _isolate(pieces, pattern):
    """`pieces` cut around every match of `pattern`: ragged (pieces, parts)."""
    return tf_text.regex_split(pieces, pattern, pattern)


def pre_tokenizer_of(tokenizer):
    """`(digits_first, pattern, cut)` of a keras-hub byte-pair tokenizer.

    Raises:
        ValueError: a pre-tokenization this module cannot reproduce.
    """
    kind = getattr(tokenizer, "pre_tokenizer", None)  # ByteLevelBPETokenizer
    unsupported = None
    if getattr(tokenizer, "add_prefix_space", False):
        unsupported = "add_prefix_space=True"
    elif getattr(tokenizer, "normalizer", None) is not None:
        unsupported = f"normalizer={tokenizer.normalizer!r}"
    elif getattr(tokenizer, "ignore_merges", False):
        unsupported = "ignore_merges=True"
    elif kind == "split" and tokenizer.split_pattern != LLAMA3_PATTERN:
        unsupported = f"split_pattern={tokenizer.split_pattern[:80]!r}"
    if unsupported:
        raise ValueError(
            "This byte-pair tokenizer cannot run inside an exported graph yet "
            f"(only GPT-2's, SmolLM2's and Llama 3's pre-splits). Received: "
            f"{unsupported}"
        )
    if kind is None:
        # keras-hub's own passes Llama 3's pattern to `tokenizers`' Split as
        # a str, which Split takes literally: its Python calls do not
        # pre-split at all, and neither does this.
        return False, None, None
    if kind == "split":
        return False, LLAMA3_PIECES, LLAMA3_CUT
    return kind == "smollm", GPT2_PIECES, GPT2_CUT


LLAMA3_PATTERN = (
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
)


def split_words(tokenizer, texts):
    """The pre-split words of 1-D string `texts`: ragged (batch, words).

    Special tokens (`unsplittable_tokens`) are cut out first, each one word.
    """
    digits_first, pattern, cut = pre_tokenizer_of(tokenizer)
    texts = tf.strings.regex_replace(texts, MARK, "")
    specials = list(tokenizer.unsplittable_tokens or [])
    if specials:
        alternation = "|".join(re.escape(s) for s in specials)
        pieces = _isolate(texts, alternation)
    else:
        pieces = tf.RaggedTensor.from_row_lengths(texts, tf.ones_like(texts, tf.int64))
    flat = pieces.flat_values  # (P,)
    parts = _isolate(flat, r"\p{N}") if digits_first else None
    if pattern is None:
        words = tf.RaggedTensor.from_row_lengths(flat, tf.ones_like(flat, tf.int64))
    elif parts is not None:
        words = _split_flat(parts.flat_values, pattern, cut)
        words = tf.RaggedTensor.from_row_splits(words, parts.row_splits).merge_dims(
            1, 2
        )
    else:
        words = _split_flat(flat, pattern, cut)
    if specials:
        # A special piece is one word, itself (the split cut it apart).
        is_special = tf.reduce_any(
            tf.equal(flat[:, None], tf.constant(specials)[None, :]), axis=1
        )
        special_rows = tf.RaggedTensor.from_row_lengths(
            flat, tf.ones_like(flat, tf.int64)
        )
        keep = tf.ragged.boolean_mask(words, ~is_special)
        # Interleave: special rows where is_special, split rows elsewhere.
        order = tf.argsort(
            tf.concat([tf.where(~is_special)[:, 0], tf.where(is_special)[:, 0]], 0)
        )
        both = tf.concat(
            [keep, tf.ragged.boolean_mask(special_rows, is_special)], axis=0
        )
        words = tf.gather(both, order)
    return tf.RaggedTensor.from_row_splits(words, pieces.row_splits).merge_dims(1, 2)


def tokenize(tokenizer, texts):
    """Token ids of 1-D string `texts`: ragged int32 (batch, tokens).

    keras-hub's merge step and cache on the exact pre-split above.
    """
    tokenizer._maybe_initialized_tf()
    words = split_words(tokenizer, texts)
    flat_words = words.flat_values
    cache = tokenizer.cache
    lookup = cache.lookup(flat_words)
    unseen = (lookup == "") & (flat_words != "")

    def merge_unseen():
        tokenizer._bpe_merge_and_update_cache_tf(tf.boolean_mask(flat_words, unseen))
        return cache.lookup(flat_words)

    merged = tf.cond(tf.reduce_any(unseen), merge_unseen, lambda: lookup)
    tokens = tf.strings.split(merged, sep=" ")
    ids = tokenizer.token_to_id_map.lookup(tokens)
    ids = tf.RaggedTensor.from_row_splits(
        ids.flat_values, tf.gather(ids.row_splits, words.row_splits)
    )
    return tf.cast(ids, tf.int32)


def detokenize(tokenizer, ids):
    """Text of ragged or dense int `ids` (batch, tokens): 1-D strings."""
    tokenizer._maybe_initialized_tf()
    text = tokenizer._detokenize_tf(ids)
    # As `tokenizers` decodes: bytes that are not UTF-8 become U+FFFD.
    return tf.strings.unicode_transcode(
        text, "UTF-8", "UTF-8", errors="replace", replacement_char=0xFFFD
    )

"""WordPiece ids back to text in TensorFlow ops, as `keras_tfm.data.detokenize`.

`join_word_pieces` (keras_tfm/data/detokenization.py) is a Python state
machine: "##" pieces join the word before them when it is a word, then
each token is spaced by its neighbours and by the quotes still open. Here
the same rules are ops an exported graph can hold: the neighbour tests are
vectorized (regular expressions over the previous and next words), and the
two sequential parts, whether the word before a piece is a word and the
stack of open quotes, are `tf.scan`s over the columns of the batch.

Python's `str.isalnum` and `str.isdigit` become RE2's `[\\p{L}\\p{N}]` and
`\\p{Nd}` (plus the superscripts 1, 2, 3): they differ on characters no
WordPiece vocabulary of ours holds (`tests/export` compares the two on
the translator's sentences).

Example:
>>> import keras_hub
>>> tokenizer = keras_hub.tokenizers.WordPieceTokenizer(
...     vocabulary=["[PAD]", "[UNK]", "I", "'", "ve", "a", "do", "##g", "."],
...     special_tokens=["[PAD]"], oov_token="[UNK]")
>>> ids = tf.ragged.constant([[2, 3, 4, 5, 6, 7, 8, 0]])
>>> detokenize(tokenizer, ids).numpy()[0].decode()
"I've a dog."
"""

import re

import tensorflow as tf

from keras_tfm.data import detokenization as rules

_WORD = r"(?s)[\p{L}\p{N}].*"
_DIGIT = r"[\p{Nd}\x{B2}\x{B3}\x{B9}]"
# Every quote mark, numbered from 1 (0: not a quote): a stack entry is the
# number of the mark that closes it.
_MARKS = sorted(set(rules._CLOSES) | set(rules._CLOSES.values()) | {"'", "’", "”"})


def _is_in(tokens, options):
    options = sorted(options)
    return tf.reduce_any(tf.equal(tokens[..., None], tf.constant(options)), axis=-1)


def _match(tokens, pattern):
    return tf.strings.regex_full_match(tokens, pattern)


def _code(tokens, marks):
    """The 1-based number in `_MARKS` of `marks[token]` (0: not a key)."""
    keys = sorted(marks)
    values = tf.constant([_MARKS.index(marks[k]) + 1 for k in keys] + [0])
    hits = tf.equal(tokens[..., None], tf.constant(keys))
    found = tf.reduce_any(hits, axis=-1)
    index = tf.where(found, tf.argmax(tf.cast(hits, tf.int32), -1, tf.int32), len(keys))
    return tf.gather(values, index)


def merge_suffixes(tokens, suffix_indicator="##"):
    """Ragged (batch, words) of ragged (batch, tokens) token strings: each
    `suffix_indicator` piece joined to the word before it when that is a
    word (`detokenization._merge_suffixes`)."""
    dense = tokens.to_tensor("")
    valid = tf.sequence_mask(tokens.row_lengths(), tf.shape(dense)[1])
    if suffix_indicator:
        escaped = re.escape(suffix_indicator)
        is_suffix = _match(dense, f"(?s){escaped}.*") & valid
        pieces = tf.where(
            is_suffix, tf.strings.regex_replace(dense, f"^{escaped}", ""), dense
        )
    else:
        is_suffix, pieces = tf.zeros_like(valid), dense
    present = valid & (pieces != "")
    word = _match(pieces, _WORD)

    def step(last_is_word, column):
        present, is_suffix, word = column
        joins = present & is_suffix & last_is_word
        state = tf.where(
            present, tf.where(is_suffix, last_is_word | word, word), last_is_word
        )
        return state, joins

    columns = tuple(tf.transpose(x) for x in (present, is_suffix, word))
    batch = tf.shape(dense)[0]
    _, joins = tf.scan(
        lambda carry, column: step(carry[0], column),
        columns,
        initializer=(tf.zeros([batch], tf.bool), tf.zeros([batch], tf.bool)),
    )
    joins = tf.transpose(joins)
    starts = present & ~joins
    segment = tf.reshape(tf.cumsum(tf.cast(starts, tf.int32), axis=1), [-1])
    # Words numbered across the batch: row r's come after rows < r's.
    counts = tf.reduce_sum(tf.cast(starts, tf.int32), axis=1)
    offsets = tf.cumsum(counts, exclusive=True)
    segment = tf.reshape(tf.reshape(segment, tf.shape(starts)) + offsets[:, None] - 1,
                         [-1])  # fmt: skip
    keep = tf.reshape(present, [-1])
    words = tf.strings.unsorted_segment_join(
        tf.boolean_mask(tf.reshape(pieces, [-1]), keep),
        tf.boolean_mask(segment, keep),
        tf.reduce_sum(counts),
    )
    return tf.RaggedTensor.from_row_lengths(words, tf.cast(counts, tf.int64))


def join_words(words):
    """1-D texts of ragged (batch, words): `join_word_pieces`' spacing."""
    w = words.to_tensor("")
    batch, width = tf.shape(w)[0], tf.shape(w)[1]
    valid = tf.sequence_mask(words.row_lengths(), width)
    before = tf.pad(w[:, :-1], [[0, 0], [1, 0]])
    after = tf.pad(w[:, 1:], [[0, 0], [0, 1]])
    between = _match(before, _WORD) & _match(after, _WORD)
    apostrophe = _is_in(w, rules._APOSTROPHES)
    contraction_after = _match(after, "[sS]|[tT]|[vV][eE]|[rR][eE]|[lL][lL]|[dD]|[mM]")
    elision = _match(before, r"\p{L}") & ~_is_in(before, ("a", "A", "I"))
    contraction = apostrophe & between & (contraction_after | elision)
    quote = ~contraction & (_is_in(w, rules._CLOSES) | apostrophe | tf.equal(w, "”"))
    # The spacing of every other token, in `join_word_pieces`' order.
    suspended = ~quote & ~contraction & tf.equal(w, "-") & between
    suspended &= _is_in(after, rules._AFTER_SUSPENDED_HYPHEN)
    joined = ~quote & ~contraction & ~suspended & _is_in(w, ("-", "/")) & between
    slash = ~quote & ~contraction & ~suspended & ~joined & tf.equal(w, "/")
    slash &= _match(before, r"(?s).*\.")
    number = ~quote & ~contraction & ~suspended & ~joined & ~slash
    number &= _is_in(w, (".", ":", ",")) & _match(before, f"(?s).*{_DIGIT}")
    number &= _match(after, f"{_DIGIT}+")
    glue_left = _is_in(w, rules._CLOSING) | contraction | suspended | joined | number
    glue_right = _is_in(w, rules._OPENING) | contraction | joined | number
    glue_left = tf.where(slash, _match(after, _WORD), glue_left)
    glue_right = tf.where(slash, _match(after, _WORD), glue_right)
    code = _code(w, {m: m for m in _MARKS})
    pushed = _code(w, {**rules._CLOSES, "'": "'"})

    def step(state, column):
        attach, stack, depth, _ = state
        valid, quote, code, pushed, glue_left, glue_right = column
        top = tf.gather(stack, tf.maximum(depth - 1, 0), batch_dims=1)
        closes = quote & (depth > 0) & tf.equal(top, code)
        opens = quote & ~closes & (pushed > 0)
        left = tf.where(quote, ~opens, glue_left)
        right = tf.where(quote, opens, glue_right)
        space = valid & ~(attach | left)
        slot = tf.one_hot(depth, width, on_value=True, off_value=False)
        stack = tf.where(slot & opens[:, None], pushed[:, None], stack)
        depth = depth - tf.cast(closes, tf.int32) + tf.cast(opens, tf.int32)
        return tf.where(valid, right, attach), stack, depth, space

    columns = tuple(
        tf.transpose(x) for x in (valid, quote, code, pushed, glue_left, glue_right)
    )
    start = (
        tf.ones([batch], tf.bool),  # no space before the first token
        tf.zeros([batch, width], tf.int32),
        tf.zeros([batch], tf.int32),
        tf.zeros([batch], tf.bool),
    )
    spaces = tf.transpose(tf.scan(step, columns, initializer=start)[3])
    pieces = tf.where(spaces, tf.strings.join([" ", w]), w)
    return tf.strings.reduce_join(pieces, axis=1)


def special_tokens(tokenizer):
    """What `keras_tfm.data.detokenize` drops: the special tokens but `[UNK]`."""
    skip = set(tokenizer.special_tokens)
    skip.update(tokenizer.get_config().get("special_tokens") or ())
    skip.discard(tokenizer.oov_token)
    return sorted(skip)


def detokenize(tokenizer, ids):
    """1-D texts of ragged int `ids` (batch, tokens), special tokens dropped."""
    vocabulary = tf.constant(tokenizer.get_vocabulary())
    tokens = tf.gather(vocabulary, tf.cast(ids, tf.int32))
    skip = special_tokens(tokenizer)
    if skip:
        tokens = tf.ragged.boolean_mask(
            tokens, ~tokens.with_flat_values(_is_in(tokens.flat_values, skip))
        )
    return join_words(merge_suffixes(tokens, tokenizer.suffix_indicator))

"""Stop strings, checked inside the compiled loop on the bytes of the text.

Each token's UTF-8 bytes are in a table (vocabulary_size, width) gathered
in-graph; the loop keeps the last bytes of each row's generated text (its
"tail") and, after every token, asks whether a stop string ends inside the
bytes that token added (it may also run past the string's end: a token
"Paris." completes the stop string "Paris"). A string may span any number of
tokens. No host round trip per token: the row is marked finished in the loop
and the host cuts the text before the stop string, which is not returned.

Streaming decodes on the host anyway: `stop_at_strings` ends a row on the
same bytes there (across a sliding window's refills too), and
`keras_tfm.lite.stop_text.visible_text` holds back the end of a text that
may be the start of a stop string, so that no piece of one is ever shown.

Example:
>>> import keras_hub
>>> tokenizer = keras_hub.tokenizers.ByteTokenizer()
>>> token_bytes(tokenizer, 256)[ord("a")]
b'a'
"""

import weakref

import numpy as np
from keras import ops

from keras_tfm.generation.buffers import buffer_length

TOKEN_WIDTH = 32
"""How many trailing bytes of each token the table keeps."""


def _byte_level_decoder():
    from keras_hub.src.tokenizers.byte_pair_tokenizer import bytes_to_unicode

    byte_list, unicode_list = bytes_to_unicode()
    pairs = zip(byte_list, unicode_list, strict=True)
    return {u: int.from_bytes(b, "big") for b, u in pairs}


def token_bytes(tokenizer, vocabulary_size):
    """The UTF-8 bytes each token id adds to the text, as a list of bytes.

    Byte-level BPE pieces are mapped back to their bytes (GPT-2's
    alphabet), SentencePiece's "▁" is a space and "<0xNN>" a byte, a
    WordPiece "##" piece joins the word before it (others start with a
    space), a byte tokenizer's id is the byte. Other tokenizers: the text of
    the id alone.
    """
    import keras_hub

    if isinstance(tokenizer, keras_hub.tokenizers.ByteTokenizer):
        return [bytes([i]) if i < 256 else b"" for i in range(vocabulary_size)]
    vocabulary = list(tokenizer.get_vocabulary())[:vocabulary_size]
    vocabulary += [""] * (vocabulary_size - len(vocabulary))
    if isinstance(tokenizer, keras_hub.tokenizers.BytePairTokenizer):
        decoder = _byte_level_decoder()
        special = set(getattr(tokenizer, "unsplittable_tokens", None) or ())
        return [
            piece.encode()
            if piece in special or not all(c in decoder for c in piece)
            else bytes(decoder[c] for c in piece)
            for piece in vocabulary
        ]
    if isinstance(tokenizer, keras_hub.tokenizers.WordPieceTokenizer):
        return [
            b"" if piece.startswith("[") and piece.endswith("]")
            else piece[2:].encode() if piece.startswith("##")
            else (" " + piece).encode()
            for piece in vocabulary
        ]  # fmt: skip
    pieces = []
    for piece in vocabulary:
        if len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
            pieces.append(bytes([int(piece[3:5], 16)]))
        else:
            pieces.append(piece.replace("\u2581", " ").encode())
    return pieces


def byte_table(pieces, width=TOKEN_WIDTH):
    """int32 (len(pieces), width): each piece's last `width` bytes,
    right-aligned, -1 before them."""
    table = np.full((len(pieces), width), -1, "int32")
    for i, piece in enumerate(pieces):
        piece = piece[-width:]
        if piece:
            table[i, width - len(piece) :] = list(piece)
    return table


_TABLES = weakref.WeakKeyDictionary()


def cached_byte_table(tokenizer, vocabulary_size):
    """`byte_table(token_bytes(...))`, computed once per tokenizer object."""
    key = (vocabulary_size, TOKEN_WIDTH)
    tables = _TABLES.setdefault(tokenizer, {})
    if key not in tables:
        tables[key] = byte_table(token_bytes(tokenizer, vocabulary_size))
    return tables[key]


def string_table(rows, smallest=16):
    """int32 (batch, strings, length) of the rows' stop strings' UTF-8 bytes,
    right-aligned and padded with -1; sizes rounded up to powers of two
    (at least 2 strings of `smallest` bytes) so that few shapes compile."""

    encoded = [[s.encode() for s in row] for row in rows]
    count = buffer_length(max(len(row) for row in encoded), smallest=2)
    length = buffer_length(
        max((len(s) for row in encoded for s in row), default=1), smallest=smallest
    )
    table = np.full((len(rows), count, length), -1, "int32")
    for i, row in enumerate(encoded):
        for j, string in enumerate(row):
            table[i, j, length - len(string) :] = list(string)
    return table


def append_bytes(tail, new):
    """`tail` (batch, T) shifted left by each row's count of new bytes, with
    them at its end. `new` (batch, W) is right-aligned, -1 before."""
    size, width = tail.shape[1], new.shape[1]
    count = ops.sum(ops.cast(new >= 0, "int32"), axis=1, keepdims=True)
    j = ops.arange(size, dtype="int32")[None, :]
    kept = ops.take_along_axis(tail, ops.minimum(j + count, size - 1), axis=1)
    positions = np.clip(width - size + np.arange(size), 0, width - 1)
    added = ops.take(new, positions, axis=1)
    return ops.where(j < size - count, kept, added), count[:, 0]


def ends_with_stop_string(tail, strings, count):
    """bool (batch,): whether a stop string ends inside the last `count`
    bytes of `tail` (or exactly at its end).

    `strings` is (batch, n, M) from `string_table`; `tail` is (batch, T)
    with T >= M + the largest `count`.
    """
    size, length = tail.shape[1], strings.shape[2]
    overhangs = size - length + 1  # every end position a window can have
    index = np.arange(length)[None, :] + size - length - np.arange(overhangs)[:, None]
    windows = ops.take(tail, index, axis=1)  # (B, D, M): window d ends d early
    agree = ops.logical_or(
        strings[:, :, None, :] < 0, ops.equal(windows[:, None], strings[:, :, None])
    )
    match = ops.all(agree, axis=-1)  # (B, n, D)
    inside = ops.less(np.arange(overhangs)[None, :], count[:, None])  # (B, D)
    real = ops.greater_equal(strings[:, :, -1], 0)  # (B, n)
    match = ops.logical_and(
        ops.logical_and(match, inside[:, None, :]), real[:, :, None]
    )
    return ops.any(match, axis=(1, 2))


def stop_at_strings(steps, strings, table):
    """Ends rows of a token stream (`strategies.streamed.stream_tokens`) on their
    stop strings, as the compiled loop does: a row ends with the token whose
    bytes (rows of `table`, see `byte_table`) complete one of its strings;
    its later tokens become None, and the stream ends when every row has
    ended or stopped.

    Example:
    >>> table = byte_table([b"a", b"b", b"ba"])
    >>> list(stop_at_strings(iter([[0], [2], [1]]), [["ab"]], table))
    [[0], [2]]
    """
    encoded = [[x.encode() for x in row] for row in strings]
    keep = max((len(x) for row in encoded for x in row), default=1) - 1
    tails, stopped = [b""] * len(strings), [False] * len(strings)
    for new in steps:
        out = [None if stopped[i] else token for i, token in enumerate(new)]
        for i, token in enumerate(out):
            if token is not None and encoded[i]:
                tail = tails[i] + bytes(int(b) for b in table[token] if b >= 0)
                stopped[i] = any(x in tail for x in encoded[i])
                tails[i] = tail[len(tail) - keep :] if keep else b""
        if any(token is not None for token in out):
            yield out
        if all(stopped):
            return

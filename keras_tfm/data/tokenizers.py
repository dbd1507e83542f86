"""Training a WordPiece vocabulary and tokenizing text for the encoders."""

import keras_hub
import numpy as np

from keras_tfm._optional import tensorflow as tf
from keras_tfm.data.word_piece_learner import learn_word_piece_vocabulary
from keras_tfm.validation import check_int_at_least

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


def train_word_piece_tokenizer(
    texts,
    vocabulary_size,
    lowercase=True,
    strip_accents=True,
    reserved_tokens=SPECIAL_TOKENS,
    name="word_piece_tokenizer",
    learner="bert",
):
    """A keras-hub `WordPieceTokenizer` whose vocabulary is learned on `texts`.

    The vocabulary comes from `keras_hub.tokenizers.compute_word_piece_vocabulary`
    (BERT's bottom-up WordPiece learning); the reserved tokens come first, so
    with the default "[PAD]" is id 0, the `padding_id` of the encoders, and
    "[UNK]" is the tokenizer's out-of-vocabulary token. Train it on the
    training split only. The tokenizer saves its vocabulary as an asset, so a
    model that holds it (`EncoderClassifier(..., tokenizer=...)`) writes it
    into its `.keras` file or preset folder.

    Args:
        texts: a list of strings (or a `tf.data.Dataset` of strings).
        vocabulary_size: the most tokens to learn, reserved ones included
            (the learner may return fewer).
        lowercase: lowercase the text before splitting (uncased BERT).
        strip_accents: drop accents before splitting.
        reserved_tokens: special tokens placed first in the vocabulary; must
            contain "[UNK]".
        name: the tokenizer layer's name (its asset folder in a preset).
        learner: "bert", keras-hub's `compute_word_piece_vocabulary`
            (minutes of pure Python on a million words), or "huggingface",
            HuggingFace's `WordPieceTrainer` (seconds; BPE merges written as
            word pieces, `learn_word_piece_vocabulary`).

    Returns:
        A `keras_hub.tokenizers.WordPieceTokenizer`.

    Example:
    >>> tokenizer = train_word_piece_tokenizer(
    ...     ["the cat sat", "the dog sat on the cat"], vocabulary_size=40)
    >>> tokenizer.token_to_id("[PAD]")
    0
    >>> tokenizer.detokenize(tokenizer("the cat"))
    'the cat'
    """
    check_int_at_least(
        "vocabulary_size", vocabulary_size, len(reserved_tokens) + 1,
        "an integer larger than the number of reserved tokens "
        f"({len(reserved_tokens)})",
    )  # fmt: skip
    if learner not in ("bert", "huggingface"):
        raise ValueError(
            '`learner` must be "bert" or "huggingface". '
            f"Received: learner={learner!r}"
        )
    if "[UNK]" not in reserved_tokens:
        raise ValueError(
            "`reserved_tokens` must contain the out-of-vocabulary token '[UNK]'. "
            f"Received: reserved_tokens={list(reserved_tokens)}"
        )
    if isinstance(texts, str):
        raise ValueError(
            "`texts` must be a list of strings, not one string. "
            f"Received: texts={texts[:40]!r}..."
        )
    if isinstance(texts, list | tuple):
        texts = [text for text in texts if text and text.strip()]
        if not texts:
            raise ValueError("`texts` must hold some non-empty text. Received: none.")
    if learner == "huggingface":
        vocabulary = learn_word_piece_vocabulary(
            list(texts) if isinstance(texts, list | tuple) else _strings(texts),
            vocabulary_size,
            lowercase,
            strip_accents,
            reserved_tokens,
        )
    else:
        if isinstance(texts, list | tuple):
            # A list would be read as file names: pass the strings as a dataset.
            texts = tf.data.Dataset.from_tensor_slices(texts).batch(1024)
        vocabulary = keras_hub.tokenizers.compute_word_piece_vocabulary(
            texts,
            vocabulary_size,
            lowercase=lowercase,
            strip_accents=strip_accents,
            reserved_tokens=list(reserved_tokens),
        )
    return keras_hub.tokenizers.WordPieceTokenizer(
        vocabulary=vocabulary,
        lowercase=lowercase,
        strip_accents=strip_accents,
        oov_token="[UNK]",
        special_tokens=[t for t in reserved_tokens if t != "[UNK]"],
        name=name,
    )


def _strings(dataset):
    """The Python strings of a `tf.data.Dataset` of strings, batched or not."""
    for batch in dataset.as_numpy_iterator():
        for text in np.atleast_1d(batch):
            yield text.decode("utf-8")


def encode_for_classification(tokenizer, texts, sequence_length=None):
    """Token ids "[CLS] text [SEP]" for `EncoderClassifier`, as NumPy arrays.

    Args:
        tokenizer: a `WordPieceTokenizer` with "[CLS]", "[SEP]" and "[PAD]".
        texts: a list of strings.
        sequence_length: pad (with "[PAD]") and truncate every row to this
            length; None returns a list of unpadded int32 arrays instead.

    Returns:
        An int32 array (len(texts), sequence_length), or a list of arrays.

    Example:
    >>> tokenizer = train_word_piece_tokenizer(["the cat sat"], 30)
    >>> ids = encode_for_classification(tokenizer, ["the cat"], 16)
    >>> ids.shape, int(ids[0, 0]), int(ids[0, -1])
    ((1, 16), 2, 0)
    """
    if isinstance(texts, str):
        raise ValueError(
            f"`texts` must be a list of strings. Received: texts={texts[:40]!r}"
        )
    if sequence_length is not None:
        check_int_at_least(
            "sequence_length", sequence_length, 3,
            "None or an integer >= 3 (room for [CLS], a token and [SEP])",
        )  # fmt: skip
    cls_id = tokenizer.token_to_id("[CLS]")
    sep_id = tokenizer.token_to_id("[SEP]")
    pad_id = tokenizer.token_to_id("[PAD]")
    pieces = tokenizer(list(texts))
    pieces = pieces.to_list() if hasattr(pieces, "to_list") else list(pieces)
    rows = []
    for ids in pieces:
        ids = [int(i) for i in ids]
        if sequence_length is not None:
            ids = ids[: sequence_length - 2]
        rows.append(np.asarray([cls_id, *ids, sep_id], dtype="int32"))
    if sequence_length is None:
        return rows
    out = np.full((len(rows), sequence_length), pad_id, dtype="int32")
    for i, row in enumerate(rows):
        out[i, : len(row)] = row
    return out

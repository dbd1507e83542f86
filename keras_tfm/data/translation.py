"""Tokenizer training and `tf.data` pipelines for translation pairs.

The pairs themselves come from a corpus loader, e.g.
`keras_tfm.datasets.trans_de_en.load_translation_pairs`.
"""

import numpy as np

from keras_tfm._optional import tensorflow as tf
from keras_tfm.data.bucketing import bucket_batch_sizes
from keras_tfm.data.detokenization import join_word_pieces
from keras_tfm.data.tokenizers import train_word_piece_tokenizer
from keras_tfm.validation import check_positive_int

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[START]", "[END]")  # ids 0, 1, 2, 3


def train_translation_tokenizer(
    texts, vocabulary_size, lowercase=False, learner="bert"
):
    """A keras-hub `WordPieceTokenizer` with a vocabulary learned from `texts`.

    `train_word_piece_tokenizer` with the translation special tokens: the
    vocabulary starts with `[PAD]`=0, `[UNK]`=1, `[START]`=2, `[END]`=3, and
    accents are kept (German umlauts); train it on both languages' training
    sentences for a shared vocabulary. `learner="huggingface"` learns it in
    seconds instead of minutes (see `train_word_piece_tokenizer`).

    Example:
    >>> tokenizer = train_translation_tokenizer(["Guten Tag.", "Good day."], 40)
    >>> tokenizer.token_to_id("[END]")
    3
    """
    if not isinstance(texts, str | tf.data.Dataset):
        texts = list(texts)  # any iterable of strings, as before
    return train_word_piece_tokenizer(
        texts,
        vocabulary_size,
        lowercase=lowercase,
        strip_accents=False,
        reserved_tokens=SPECIAL_TOKENS,
        name="tokenizer",
        learner=learner,
    )


def detokenize_text(text):
    """Joins WordPiece output back into plain text for BLEU and for reading.

    `WordPieceTokenizer.detokenize` puts a space between every word piece
    that is not a `##` suffix, so punctuation ends up spaced out; this
    respaces its tokens with `keras_tfm.data.detokenization.join_word_pieces`.

    Example:
    >>> detokenize_text("That really isn ' t possible .")
    "That really isn't possible."
    """
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    return join_word_pieces(text.split())


def _token_lists(ids):
    if hasattr(ids, "to_list"):
        ids = ids.to_list()
    return [[int(i) for i in row] for row in ids]


def translation_dataset(
    pairs,
    tokenizer,
    batch_size,
    max_length=32,
    shuffle=False,
    seed=0,
    bucket_boundaries=(8, 16, 24),
    tokens_per_batch=None,
):
    """A `tf.data` pipeline of teacher-forced batches, batched by length.

    Each pair becomes `source_ids` = tokens(German), decoder inputs
    `target_ids` = [START] + tokens(English) and labels = tokens(English) +
    [END]; pairs longer than `max_length - 1` tokens on either side are
    dropped. Pairs of similar lengths are batched together, each batch
    padded with 0 to its bucket's boundary (or `max_length`), so a compiled
    `fit` sees few shapes; a shuffled dataset draws new batches each pass.
    With `tokens_per_batch`, shorter buckets take more pairs per batch (see
    `bucket_batch_sizes`), so a corpus of single words and long sentences
    costs about the same per step.

    Args:
        pairs: `(german, english)` string tuples.
        tokenizer: from `train_translation_tokenizer` ([START]=2, [END]=3).
        batch_size: pairs per batch.
        max_length: the longest sequence, in tokens, with [START]/[END].
        shuffle: shuffle the pairs each epoch (training).
        seed: the shuffle seed.
        bucket_boundaries: increasing lengths that separate the buckets.
        tokens_per_batch: optional token budget per batch (pairs times
            padded length); `batch_size` then only caps a batch at 8x
            `batch_size` pairs.

    Returns:
        A dataset of `({"source_ids", "target_ids"}, labels)` int32 batches.

    Example:
    >>> dataset = translation_dataset(train, tokenizer, batch_size=64)
    >>> model.fit(dataset, epochs=10)
    """
    pairs = list(pairs)
    if not pairs:
        raise ValueError("`pairs` is empty. Received: pairs=[]")
    check_positive_int("batch_size", batch_size)
    check_positive_int("max_length", max_length)
    start = tokenizer.token_to_id("[START]")
    end = tokenizer.token_to_id("[END]")
    german = _token_lists(tokenizer([de for de, _ in pairs]))
    english = _token_lists(tokenizer([en for _, en in pairs]))
    examples = [
        (de, [start, *en], [*en, end])
        for de, en in zip(german, english, strict=True)
        if 0 < len(de) <= max_length - 1 and len(en) <= max_length - 1
    ]
    if not examples:
        raise ValueError(
            f"No pair fits max_length={max_length} tokens. Received: {len(pairs)} pairs"
        )

    boundaries = [b for b in bucket_boundaries if b < max_length] + [max_length]
    sizes = bucket_batch_sizes(batch_size, boundaries, tokens_per_batch)
    lengths = np.array([max(len(s), len(y)) for s, _, y in examples])
    buckets = np.searchsorted(np.array(boundaries), lengths)
    rng = np.random.default_rng(seed)

    # Batches are drawn in NumPy, not with tf.data's per-example
    # bucket_by_sequence_length: on the dictionary's 900,000 pairs that took
    # over a minute of CPU a pass; this takes a second.
    def batches():
        order = rng.permutation(len(examples)) if shuffle else np.arange(len(examples))
        groups = []
        for bucket, (length, size) in enumerate(zip(boundaries, sizes, strict=True)):
            members = order[buckets[order] == bucket]
            groups += [
                (length, members[i : i + size]) for i in range(0, len(members), size)
            ]
        if shuffle:
            groups = [groups[i] for i in rng.permutation(len(groups))]
        for length, members in groups:
            padded = np.zeros((3, len(members), length), np.int32)
            for row, index in enumerate(members):
                for component, ids in enumerate(examples[index]):
                    padded[component, row, : len(ids)] = ids
            yield tuple(padded)

    spec = tf.TensorSpec((None, None), tf.int32)
    dataset = tf.data.Dataset.from_generator(batches, output_signature=(spec,) * 3)
    dataset = dataset.map(
        lambda s, t, y: ({"source_ids": s, "target_ids": t}, y),
        num_parallel_calls=tf.data.AUTOTUNE,
    )
    # The number of batches is fixed by the lengths alone (each bucket ends
    # with one partial batch): stating it lets Keras show progress and stops
    # it from warning that the input "ran out of data".
    counts = np.bincount(buckets, minlength=len(boundaries))
    batches_per_pass = sum(
        -(-int(n) // size) for n, size in zip(counts, sizes, strict=True) if n
    )
    dataset = dataset.apply(tf.data.experimental.assert_cardinality(batches_per_pass))
    return dataset.prefetch(tf.data.AUTOTUNE)

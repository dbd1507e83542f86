"""A `tf.data` pipeline for text classification: tokenize, bucket, batch."""

import numpy as np

from keras_tfm._optional import tensorflow as tf
from keras_tfm.data.bucketing import (
    batch_by_length,
    bucket_batch_sizes,
    length_buckets,
)
from keras_tfm.data.tokenizers import encode_for_classification


def classification_dataset(
    texts,
    labels,
    tokenizer,
    batch_size,
    max_sequence_length=128,
    bucket_lengths=None,
    shuffle=False,
    seed=0,
):
    """A `tf.data` pipeline of `(token_ids, label)` batches bucketed by length.

    Texts become "[CLS] text [SEP]" ids truncated to `max_sequence_length`
    (`encode_for_classification`), then `batch_by_length` pads each batch to
    its bucket's length only (with `tokens_per_batch = batch_size *
    max_sequence_length`, so shorter buckets take larger batches).

    Args:
        texts: list of strings.
        labels: int class indices, one per text.
        tokenizer: a trained `WordPieceTokenizer` (see `train_word_piece_tokenizer`).
        batch_size: rows per batch of the longest bucket.
        max_sequence_length: the longest sequence, [CLS] and [SEP] included.
        bucket_lengths: padded lengths; default `length_buckets(max_sequence_length)`.
        shuffle: reshuffle the examples every epoch (training).
        seed: the shuffling seed.

    Returns:
        A `tf.data.Dataset` of `(int32 (batch, length), int32 (batch,))`.
    """
    labels = np.asarray(labels, dtype="int32")
    if len(texts) != len(labels):
        raise ValueError(
            "`texts` and `labels` must have the same length. Received: "
            f"len(texts)={len(texts)}, len(labels)={len(labels)}"
        )
    if len(texts) == 0:
        raise ValueError("`texts` is empty. Received: len(texts)=0")
    ids = encode_for_classification(tokenizer, texts)
    # Truncate long rows, keeping their final [SEP].
    ids = [
        np.concatenate([row[: max_sequence_length - 1], row[-1:]])
        if len(row) > max_sequence_length
        else row
        for row in ids
    ]
    ragged = tf.ragged.constant(ids, dtype=tf.int32)
    dataset = tf.data.Dataset.from_tensor_slices((ragged, labels))
    # The slices of a ragged matrix have a ragged spec; a map makes them
    # plain 1-D tensors, which padded batching needs.
    dataset = dataset.map(lambda x, y: (tf.reshape(x, [-1]), y))
    if shuffle:
        dataset = dataset.shuffle(len(labels), seed=seed, reshuffle_each_iteration=True)
    if bucket_lengths is None:
        bucket_lengths = length_buckets(max_sequence_length)
    tokens_per_batch = batch_size * max_sequence_length
    dataset = batch_by_length(
        dataset,
        batch_size,
        bucket_lengths,
        padding_id=tokenizer.token_to_id("[PAD]"),
        tokens_per_batch=tokens_per_batch,
    )
    # Each bucket yields ceil(members / its batch size) batches whatever the
    # order: stating the count lets Keras show progress and end epochs cleanly.
    buckets = np.searchsorted(bucket_lengths, [len(row) for row in ids])
    sizes = bucket_batch_sizes(batch_size, bucket_lengths, tokens_per_batch)
    count = sum(-(-int(np.sum(buckets == b)) // size) for b, size in enumerate(sizes))
    dataset = dataset.apply(tf.data.experimental.assert_cardinality(count))
    return dataset.prefetch(tf.data.AUTOTUNE)

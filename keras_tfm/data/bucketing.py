"""Batching variable-length token sequences by length, so little compute pads."""

import numpy as np
import tensorflow as tf


def length_buckets(max_sequence_length, smallest=16):
    """Bucket lengths doubling from `smallest` up to `max_sequence_length`.

    Example:
    >>> length_buckets(128)
    [16, 32, 64, 128]
    >>> length_buckets(100)
    [16, 32, 64, 100]
    """
    if not isinstance(max_sequence_length, int) or max_sequence_length < 1:
        raise ValueError(
            "`max_sequence_length` must be a positive integer. "
            f"Received: max_sequence_length={max_sequence_length!r}"
        )
    lengths = []
    length = smallest
    while length < max_sequence_length:
        lengths.append(length)
        length *= 2
    return [*lengths, max_sequence_length]


def bucket_batch_sizes(batch_size, bucket_lengths, tokens_per_batch=None):
    """Rows per batch of each bucket: `batch_size`, or a token budget's share.

    Example:
    >>> bucket_batch_sizes(32, [16, 32, 64, 128], tokens_per_batch=32 * 128)
    [256, 128, 64, 32]
    """
    lengths = list(bucket_lengths)
    if tokens_per_batch is None:
        return [batch_size] * len(lengths)
    if not isinstance(tokens_per_batch, int) or tokens_per_batch < lengths[-1]:
        raise ValueError(
            "`tokens_per_batch` must be an integer at least the largest bucket "
            f"length {lengths[-1]}. Received: tokens_per_batch={tokens_per_batch!r}"
        )
    return [int(np.clip(tokens_per_batch // n, 1, 8 * batch_size)) for n in lengths]


def batch_by_length(
    dataset,
    batch_size,
    bucket_lengths,
    padding_id=0,
    tokens_per_batch=None,
    drop_remainder=False,
):
    """Batches a dataset of 1-D token sequences with others of similar length.

    Wraps `tf.data.Dataset.bucket_by_sequence_length`. Each example goes to
    the first bucket whose length is at least its own, and is padded with
    `padding_id` to exactly that length (`pad_to_bucket_boundary`), so a
    model sees only `len(bucket_lengths)` shapes: one compiled graph each,
    and no retracing. With `tokens_per_batch`, shorter buckets take bigger
    batches (`tokens_per_batch // length` rows, at most 8x `batch_size`), so
    every step costs about the same; otherwise every bucket uses
    `batch_size`. Sequences longer than the last bucket raise an error:
    truncate them first.

    Args:
        dataset: a `tf.data.Dataset` of int token-id vectors, or of
            `(token_ids, label...)` tuples whose first element is the vector.
        batch_size: rows per batch (the largest bucket's with `tokens_per_batch`).
        bucket_lengths: increasing padded lengths, e.g. `length_buckets(128)`.
        padding_id: the id that pads.
        tokens_per_batch: optional token budget per batch.
        drop_remainder: drop each bucket's last, smaller batch.

    Returns:
        A batched `tf.data.Dataset` with the same structure.

    Example:
    >>> ds = tf.data.Dataset.from_generator(
    ...     lambda: (np.arange(1, n + 1) for n in [3, 20, 5, 30]),
    ...     output_signature=tf.TensorSpec([None], tf.int64))
    >>> [b.shape[1] for b in batch_by_length(ds, 2, [8, 32])]
    [8, 32]
    """
    if (
        isinstance(batch_size, bool)
        or not isinstance(batch_size, int)
        or batch_size < 1
    ):
        raise ValueError(
            "`batch_size` must be a positive integer. "
            f"Received: batch_size={batch_size!r}"
        )
    lengths = list(bucket_lengths)
    if (
        not lengths
        or any(not isinstance(n, int) or n < 1 for n in lengths)
        or lengths != sorted(set(lengths))
    ):
        raise ValueError(
            "`bucket_lengths` must be strictly increasing positive integers. "
            f"Received: bucket_lengths={bucket_lengths!r}"
        )
    batch_sizes = bucket_batch_sizes(batch_size, lengths, tokens_per_batch)

    structure = dataset.element_spec
    is_tuple = isinstance(structure, tuple)
    last = lengths[-1]

    def length_of(*element):
        ids = element[0]
        length = tf.shape(ids)[0]
        # Fail loudly rather than let tf.data drop or mis-bucket the example.
        tf.debugging.assert_less_equal(
            length,
            last,
            message=f"a sequence is longer than the last bucket length {last}; "
            "truncate it first",
        )
        return length

    # bucket_by_sequence_length puts length L in the bucket b with
    # boundaries[b-1] <= L < boundaries[b] and pads to boundaries[b] - 1.
    boundaries = [n + 1 for n in lengths[:-1]]
    padding_values = None
    if is_tuple:
        padding_values = tuple(
            tf.constant(padding_id, spec.dtype) if i == 0 else None
            for i, spec in enumerate(structure)
        )
    else:
        padding_values = tf.constant(padding_id, structure.dtype)
    batched = dataset.bucket_by_sequence_length(
        element_length_func=length_of,
        bucket_boundaries=boundaries,
        bucket_batch_sizes=batch_sizes,
        padded_shapes=None,
        padding_values=padding_values,
        pad_to_bucket_boundary=False,
        drop_remainder=drop_remainder,
    )
    # pad_to_bucket_boundary=True pads to boundary - 1 and refuses the last
    # (open) bucket, so pad to each bucket's length here instead.
    bucket_lengths_tensor = tf.constant(lengths, tf.int32)

    def pad_to_bucket(*batch):
        ids = batch[0]
        length = tf.shape(ids)[1]
        index = tf.searchsorted(bucket_lengths_tensor, [length], side="left")[0]
        target = bucket_lengths_tensor[index]
        ids = tf.pad(ids, [[0, 0], [0, target - length]], constant_values=padding_id)
        return (ids, *batch[1:]) if is_tuple else ids

    return batched.map(pad_to_bucket, num_parallel_calls=tf.data.AUTOTUNE)


def padding_share(dataset, padding_id=0):
    """The share of padded positions over a batched dataset (first element).

    Example:
    >>> padding_share(tf.data.Dataset.from_tensors(np.array([[1, 2, 0, 0]])))
    0.5
    """
    total = padded = 0
    for batch in dataset:
        ids = batch[0] if isinstance(batch, tuple) else batch
        ids = np.asarray(ids)
        total += ids.size
        padded += int(np.sum(ids == padding_id))
    if total == 0:
        raise ValueError("`dataset` is empty. Received: a dataset with no batches.")
    return padded / total

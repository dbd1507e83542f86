"""Batching variable-length token sequences by length, so little compute pads."""

import numpy as np

from keras_tfm._optional import tensorflow as tf
from keras_tfm.validation import check_positive_int


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

    Wraps `tf.data.Dataset.bucket_by_sequence_length`. Every rank-1
    component of an element is a sequence: a plain vector, or each vector of
    a tuple such as `(token_ids, label)` or `(source_ids, target_ids,
    labels)`. An example's length is that of its longest sequence; it goes
    to the first bucket whose length is at least that, and all its sequences
    are padded with `padding_id` to exactly the bucket's length, so a model
    sees only `len(bucket_lengths)` shapes: one compiled graph each, and no
    retracing. Scalar components (class labels) pass through untouched.
    With `tokens_per_batch`, shorter buckets take bigger batches
    (`tokens_per_batch // length` rows, at most 8x `batch_size`), so every
    step costs about the same; otherwise every bucket uses `batch_size`.
    Sequences longer than the last bucket raise an error: truncate them
    first.

    Args:
        dataset: a `tf.data.Dataset` of int token-id vectors, or of tuples
            holding one or more such vectors and any scalars.
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
    check_positive_int("batch_size", batch_size)
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
    specs = structure if is_tuple else (structure,)
    # The rank-1 components are the sequences; the others pass through.
    is_sequence = [
        isinstance(spec, tf.TensorSpec) and spec.shape.rank == 1 for spec in specs
    ]
    if not any(is_sequence):
        raise ValueError(
            "`dataset` must hold 1-D token-id vectors, alone or in a tuple. "
            f"Received: element_spec={structure!r}"
        )
    last = lengths[-1]

    def longest(element, axis):
        return tf.reduce_max(
            tf.stack(
                [
                    tf.shape(component)[axis]
                    for component, sequence in zip(element, is_sequence, strict=True)
                    if sequence
                ]
            )
        )

    def length_of(*element):
        length = longest(element, axis=0)
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
    padding_values = tuple(
        tf.constant(padding_id, spec.dtype) if sequence else None
        for spec, sequence in zip(specs, is_sequence, strict=True)
    )
    batched = dataset.bucket_by_sequence_length(
        element_length_func=length_of,
        bucket_boundaries=boundaries,
        bucket_batch_sizes=batch_sizes,
        padded_shapes=None,
        padding_values=padding_values if is_tuple else padding_values[0],
        pad_to_bucket_boundary=False,
        drop_remainder=drop_remainder,
    )
    # pad_to_bucket_boundary=True pads to boundary - 1 and refuses the last
    # (open) bucket, so pad to each bucket's length here instead. The
    # batch's longest sequence lies in its bucket's range, so it names the
    # bucket; each sequence is padded to that bucket's length.
    bucket_lengths_tensor = tf.constant(lengths, tf.int32)

    def pad_to_bucket(*batch):
        length = longest(batch, axis=1)
        index = tf.searchsorted(bucket_lengths_tensor, [length], side="left")[0]
        target = bucket_lengths_tensor[index]
        padded = tuple(
            tf.pad(
                component,
                [[0, 0], [0, target - tf.shape(component)[1]]],
                constant_values=tf.cast(padding_id, component.dtype),
            )
            if sequence
            else component
            for component, sequence in zip(batch, is_sequence, strict=True)
        )
        return padded if is_tuple else padded[0]

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

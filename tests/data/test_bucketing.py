import numpy as np
import pytest
import tensorflow as tf

from keras_tfm.data.bucketing import (
    batch_by_length,
    bucket_batch_sizes,
    length_buckets,
    padding_share,
)


def ragged_dataset(lengths, with_labels=False):
    rows = [np.arange(1, n + 1, dtype="int32") for n in lengths]
    dataset = tf.data.Dataset.from_generator(
        lambda: iter(rows), output_signature=tf.TensorSpec([None], tf.int32)
    )
    if with_labels:
        labels = tf.data.Dataset.from_tensor_slices(np.asarray(lengths, "int32"))
        dataset = tf.data.Dataset.zip((dataset, labels))
    return dataset


def test_length_buckets():
    assert length_buckets(128) == [16, 32, 64, 128]
    assert length_buckets(100, smallest=8) == [8, 16, 32, 64, 100]
    assert length_buckets(10) == [10]
    with pytest.raises(ValueError, match="max_sequence_length"):
        length_buckets(0)


def test_bucket_batch_sizes():
    assert bucket_batch_sizes(4, [8, 16]) == [4, 4]
    assert bucket_batch_sizes(32, [16, 32, 64, 128], 32 * 128) == [256, 128, 64, 32]
    assert bucket_batch_sizes(2, [1, 16], 32) == [16, 2]  # capped at 8x
    with pytest.raises(ValueError, match="tokens_per_batch"):
        bucket_batch_sizes(2, [8, 16], 10)


def test_batches_pad_to_their_bucket_only_and_keep_every_example():
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 33, size=200).tolist()
    dataset = batch_by_length(ragged_dataset(lengths, True), 8, [4, 8, 16, 32])
    seen = []
    for x, y in dataset:
        x = np.asarray(x)
        assert x.shape[1] in (4, 8, 16, 32)
        real = (x != 0).sum(axis=1)
        # Every row belongs in this bucket: longer than the previous length.
        previous = {4: 0, 8: 4, 16: 8, 32: 16}[x.shape[1]]
        assert (real > previous).all() and (real <= x.shape[1]).all()
        for row, label in zip(x, np.asarray(y), strict=True):
            assert row[:label].tolist() == list(range(1, label + 1))
            seen.append(int(label))
    assert sorted(seen) == sorted(lengths)
    bucketed = padding_share(dataset)
    padded_to_max = 1 - np.mean(lengths) / 32
    assert bucketed < padded_to_max / 2


def test_plain_tensors_and_padding_id():
    dataset = batch_by_length(ragged_dataset([3, 5]), 2, [8], padding_id=-1)
    (batch,) = list(dataset)
    assert np.asarray(batch).tolist() == [
        [1, 2, 3, -1, -1, -1, -1, -1],
        [1, 2, 3, 4, 5, -1, -1, -1],
    ]


def test_tuples_of_sequences_pad_together_and_scalars_pass_through():
    rows = [
        (np.arange(1, 4, dtype="int32"), np.arange(1, 7, dtype="int32"), 7),
        (np.arange(1, 3, dtype="int32"), np.arange(1, 2, dtype="int32"), 8),
        (np.arange(1, 11, dtype="int32"), np.arange(1, 3, dtype="int32"), 9),
    ]
    spec = tf.TensorSpec([None], tf.int32)
    dataset = tf.data.Dataset.from_generator(
        lambda: iter(rows),
        output_signature=(spec, spec, tf.TensorSpec([], tf.int32)),
    )
    batches = list(batch_by_length(dataset, 2, [4, 8, 16], padding_id=-1))
    by_label = {}
    for source, target, label in batches:
        assert label.shape.rank == 1  # one scalar per row, not padded
        # Both sequences are padded to the bucket of the longer one.
        assert source.shape[1] == target.shape[1]
        columns = (source.numpy(), target.numpy(), label.numpy())
        for s, t, y in zip(*columns, strict=True):
            by_label[int(y)] = (s.tolist(), t.tolist())
    assert by_label == {
        7: ([1, 2, 3, -1, -1, -1, -1, -1], [1, 2, 3, 4, 5, 6, -1, -1]),
        8: ([1, 2, -1, -1], [1, -1, -1, -1]),
        9: ([*range(1, 11), *[-1] * 6], [1, 2, *[-1] * 14]),
    }
    assert sorted(b[0].shape[1] for b in batches) == [4, 8, 16]


def test_datasets_without_sequences_are_refused():
    dataset = tf.data.Dataset.from_tensor_slices(np.arange(3))
    with pytest.raises(ValueError, match="1-D token-id vectors"):
        batch_by_length(dataset, 2, [4])


def test_too_long_sequences_fail_loudly():
    dataset = batch_by_length(ragged_dataset([3, 12]), 2, [4, 8])
    with pytest.raises(tf.errors.InvalidArgumentError, match="longer than the last"):
        list(dataset)


def test_bad_arguments():
    dataset = ragged_dataset([3])
    with pytest.raises(ValueError, match="batch_size"):
        batch_by_length(dataset, 0, [4])
    with pytest.raises(ValueError, match="bucket_lengths"):
        batch_by_length(dataset, 2, [8, 4])
    with pytest.raises(ValueError, match="empty"):
        padding_share(dataset.take(0).batch(1))


def test_docstring_examples():
    import doctest

    from keras_tfm.data import bucketing

    result = doctest.testmod(bucketing, extraglobs={"np": np, "tf": tf})
    assert result.attempted > 0 and result.failed == 0

import numpy as np
import pytest

from keras_tfm.data import next_token_windows, split_at_line, window_dataset


@pytest.mark.parametrize("num_tokens,sequence_length", [(7, 2), (100, 9), (101, 10)])
def test_overlapping_windows_score_every_token_but_the_first_once(
    num_tokens, sequence_length
):
    ids = np.arange(num_tokens) + 1
    windows = next_token_windows(ids, sequence_length, overlap=True)
    labels = windows[:, 1:].reshape(-1)
    count = (num_tokens - 1) // sequence_length
    assert labels.tolist() == list(range(2, 2 + count * sequence_length))
    # Each window's inputs are the ids right before its labels.
    np.testing.assert_array_equal(windows[:, :-1] + 1, windows[:, 1:])


def test_disjoint_windows_tile_the_stream():
    windows = next_token_windows(np.arange(23), 4)
    assert windows.shape == (4, 5) and windows.dtype == np.int32
    np.testing.assert_array_equal(windows.reshape(-1), np.arange(20))


def test_too_short_a_stream_is_refused():
    with pytest.raises(ValueError, match="no window"):
        next_token_windows([1, 2, 3], 3, overlap=True)
    for bad in (0, -2, 2.0, True):
        with pytest.raises(ValueError, match="sequence_length"):
            next_token_windows([1, 2, 3], bad, overlap=True)


def test_split_at_line_keeps_lines_whole():
    text = "".join(f"verse {i}\n" for i in range(100))
    train, held_out = split_at_line(text, 0.05)
    assert train + held_out == text
    assert train.endswith("\n") and held_out.startswith("verse ")
    assert 0.04 < len(held_out) / len(text) < 0.07
    with pytest.raises(ValueError, match="line break"):
        split_at_line("one line without a break", 0.1)
    with pytest.raises(ValueError, match="validation_fraction"):
        split_at_line(text, 0.0)


def test_window_dataset_shuffles_whole_windows():
    windows = np.arange(40).reshape(8, 5)
    batches = list(window_dataset(windows, 3, shuffle=True, seed=1))
    inputs = np.concatenate([x.numpy() for x, _ in batches])
    labels = np.concatenate([y.numpy() for _, y in batches])
    assert sorted(inputs[:, 0].tolist()) == list(range(0, 40, 5))
    np.testing.assert_array_equal(labels, inputs + 1)

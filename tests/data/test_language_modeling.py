import numpy as np
import pytest

from keras_tfm.data import (
    interleaved_split,
    next_token_windows,
    split_at_line,
    window_dataset,
)


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


def test_interleaved_split_holds_out_every_tenth_block_of_whole_lines():
    lines = [f"verse {i} " + "x" * (i % 7) + "\n" for i in range(1000)]
    text = "".join(lines)
    train, held_out = interleaved_split(text)
    # Whole lines, none lost or repeated, each on one side.
    assert sorted(train.splitlines(True) + held_out.splitlines(True)) == sorted(lines)
    assert len(held_out) == pytest.approx(len(text) / 10, rel=0.05)
    # Spread through the text: one held-out run of lines in each tenth.
    positions = [i for i, line in enumerate(lines) if line in set(
        held_out.splitlines(True))]  # fmt: skip
    runs = np.split(positions, np.flatnonzero(np.diff(positions) > 1) + 1)
    assert len(runs) == 10
    # (10% of the characters ends near line 100: later lines are longer.)
    assert [round(run.mean() / 100) for run in runs] == list(range(1, 11))
    assert all(len(run) == pytest.approx(100 / 10, abs=2) for run in runs)


def test_interleaved_split_cuts_inside_a_line_only_when_it_must():
    text = "a" * 1000  # no line break: cut at the characters
    train, held_out = interleaved_split(text, num_blocks=10, held_out_every=5)
    assert (len(train), len(held_out)) == (800, 200)


@pytest.mark.parametrize("every", [1, 101, 2.5, True])
def test_interleaved_split_refuses_bad_settings(every):
    with pytest.raises(ValueError, match="Received: held_out_every"):
        interleaved_split("a\nb\n" * 100, held_out_every=every)
    with pytest.raises(ValueError, match="too short"):
        interleaved_split("ab", num_blocks=100, held_out_every=10)

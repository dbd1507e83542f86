import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_tfm.models import MaskedLMMasker

PAD, CLS, SEP, MASK = 0, 1, 2, 3
VOCAB = 1000


def padded_batch(n, seq, seed=0):
    """[CLS] words [SEP] padding, with 10 to seq-2 words per row."""
    rng = np.random.default_rng(seed)
    ids = np.zeros((n, seq), "int32")
    for i in range(n):
        length = rng.integers(10, seq - 1)
        ids[i, 0] = CLS
        ids[i, 1 : length + 1] = rng.integers(4, VOCAB, length)
        ids[i, length + 1] = SEP
    return ids


def make_masker(**overrides):
    config = dict(
        vocabulary_size=VOCAB,
        mask_token_id=MASK,
        mask_selection_length=64,
        unselectable_token_ids=[CLS, SEP],
    )
    return MaskedLMMasker(**{**config, **overrides})


# The two paths: TensorFlow Text (tf.data, and eager calls on TensorFlow)
# and keras-hub's Python sampler (eager calls on JAX and PyTorch).
PATHS = {
    "tensorflow": lambda masker, ids: masker(ids),
    "python": lambda masker, ids: masker._call_python(ids),
}


@pytest.mark.parametrize("path", PATHS)
def test_bert_statistics_on_a_large_batch(path):
    ids = padded_batch(3000, 64)
    x, y, weights = PATHS[path](make_masker(), ids)
    masked = x["token_ids"].numpy()
    positions = x["mask_positions"].numpy()
    weights = weights.numpy().astype(bool)
    y = y.numpy()

    eligible = (ids != PAD) & (ids != CLS) & (ids != SEP)
    selected = np.zeros_like(eligible)
    rows = np.nonzero(weights)[0]
    selected[rows, positions[weights]] = True
    # tf-text selects ceil(15%) of each row's eligible tokens; the Python
    # path each eligible token with probability 15% (+-0.003 at 3 sigma here).
    rate = selected.sum() / eligible.sum()
    assert 0.145 < rate < 0.17
    # Never padding nor special tokens, and the labels are the original ids.
    assert not np.any(selected & ~eligible)
    np.testing.assert_array_equal(y[weights], ids[rows, positions[weights]])
    # Tokens that were not selected are untouched.
    np.testing.assert_array_equal(masked[~selected], ids[~selected])

    new, old = masked[selected], ids[selected]
    to_mask = np.mean(new == MASK)
    unchanged = np.mean(new == old)
    to_random = np.mean((new != MASK) & (new != old))
    assert abs(to_mask - 0.8) < 0.015
    assert abs(unchanged - 0.1) < 0.01
    assert abs(to_random - 0.1) < 0.01


@pytest.mark.parametrize("path", PATHS)
def test_padding_mask_comes_from_the_ids_before_masking(path):
    ids = padded_batch(50, 20)
    masker = make_masker(vocabulary_size=5, random_token_rate=1.0, mask_token_rate=0)
    x, _, _ = PATHS[path](masker, np.minimum(ids, 4))
    np.testing.assert_array_equal(x["padding_mask"], ids != PAD)


def test_selection_length_caps_and_pads_the_slots():
    ids = padded_batch(200, 64)
    x, y, weights = make_masker(mask_selection_length=2)(ids)
    assert tuple(x["mask_positions"].shape) == (200, 2)
    assert tuple(y.shape) == tuple(weights.shape) == (200, 2)
    np.testing.assert_array_equal(weights, 1.0)  # 15% of >=10 words is >= 2

    short = np.array([[CLS, 7, 8, SEP, PAD, PAD]], "int32")
    x, y, weights = make_masker(mask_selection_length=4)(short)
    np.testing.assert_array_equal(weights, [[1, 0, 0, 0]])
    assert x["mask_positions"].numpy()[0, 0] in (1, 2)


def test_works_in_a_dataset_map_with_segment_ids():
    ids = padded_batch(16, 12)
    segments = (np.arange(12)[None] > 5).astype("int32").repeat(16, 0)
    dataset = (
        tf.data.Dataset.from_tensor_slices({"token_ids": ids, "segment_ids": segments})
        .batch(8)
        .map(make_masker(mask_selection_length=3))
    )
    batches = list(dataset)
    assert len(batches) == 2
    x, y, weights = batches[0]
    assert set(x) == {"token_ids", "padding_mask", "mask_positions", "segment_ids"}
    np.testing.assert_array_equal(x["segment_ids"], segments[:8])
    assert tuple(x["mask_positions"].shape) == (8, 3)
    # A new mask is drawn at each call.
    masker = make_masker(mask_selection_length=3)
    batch = {"token_ids": ids[:8], "segment_ids": segments[:8]}
    draws = [masker(batch)[0]["mask_positions"].numpy() for _ in range(3)]
    assert any(not np.array_equal(draws[0], draw) for draw in draws[1:])


def test_a_repeated_dataset_draws_new_masks_at_every_pass():
    """The documented way to fit: one endless iteration, fresh masks per pass.

    Under a fixed global seed a re-iterated finite dataset would replay the
    same masks (that is why the docstring asks for `.repeat()`).
    """
    keras.utils.set_random_seed(3)
    ids = padded_batch(8, 12)
    dataset = (
        tf.data.Dataset.from_tensor_slices(ids)
        .batch(4)
        .repeat()
        .map(make_masker(mask_selection_length=3))
    )
    batches = iter(dataset)
    first_pass = [next(batches)[0]["mask_positions"].numpy() for _ in range(2)]
    second_pass = [next(batches)[0]["mask_positions"].numpy() for _ in range(2)]
    assert not all(map(np.array_equal, first_pass, second_pass))


@pytest.mark.parametrize("path", PATHS)
def test_unbatched_input_gives_unbatched_output(path):
    masker = make_masker(mask_selection_length=3)
    x, y, weights = PATHS[path](masker, np.array([CLS, 5, 6, 7, SEP]))
    assert tuple(x["token_ids"].shape) == (5,)
    assert tuple(x["mask_positions"].shape) == tuple(y.shape) == (3,)


def test_config_round_trips_through_keras_serialization():
    masker = make_masker(mask_selection_rate=0.2, padding_id=5)
    config = masker.get_config()
    assert config["unselectable_token_ids"] == [CLS, SEP]
    clone = keras.saving.deserialize_keras_object(
        keras.saving.serialize_keras_object(masker)
    )
    assert isinstance(clone, MaskedLMMasker)
    assert clone.get_config() == config


@pytest.mark.parametrize(
    "inputs, message",
    [
        (np.ones((2, 3, 4), "int32"), "rank 2"),
        (np.ones((2, 4), "float32"), "token_ids.dtype=float32"),
        ({"ids": np.ones((2, 4), "int32")}, "ids"),
    ],
)
def test_bad_inputs_raise(inputs, message):
    with pytest.raises(ValueError, match=message):
        make_masker()(inputs)
    if not isinstance(inputs, dict):  # the Python path checks the same
        with pytest.raises(ValueError, match=message):
            make_masker()._call_python(inputs)


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"mask_token_id": VOCAB}, f"mask_token_id={VOCAB}"),
        ({"mask_selection_length": 0}, "mask_selection_length=0"),
        ({"mask_selection_rate": 1.5}, "mask_selection_rate=1.5"),
        ({"mask_token_rate": 0.9, "random_token_rate": 0.2}, "at most 1"),
        ({"unselectable_token_ids": [-1]}, "unselectable_token_ids=-1"),
        ({"padding_id": 1.0}, "padding_id=1.0"),
    ],
)
def test_bad_arguments_raise(overrides, message):
    with pytest.raises(ValueError, match=message):
        make_masker(**overrides)

"""The language-model recipe (`train_language_model`) and its callbacks."""

import doctest
import json

import keras
import numpy as np
import pytest

import keras_tfm
from keras_tfm import training
from keras_tfm.training import callbacks, language_model_training


def batches(dataset):
    return [x.numpy().tolist() for x, _ in dataset]


def test_each_pass_is_an_order_of_the_seed_and_pass_alone():
    windows = np.arange(10 * 5).reshape(10, 5)
    examples = language_model_training.next_token_pairs(windows)

    def stream(start, stop, seed=0):
        return batches(language_model_training._stream(
            examples, 10, 4, seed, start, stop, steps_per_pass=3))  # fmt: skip

    whole = stream(0, 9)  # three passes of 3 batches (4 + 4 + 2 windows)
    assert [len(batch) for batch in whole] == [4, 4, 2] * 3
    for p in range(3):  # every pass holds each window's inputs once
        rows = sorted(row for batch in whole[3 * p : 3 * p + 3] for row in batch)
        assert rows == windows[:, :-1].tolist()
    assert whole[:3] != whole[3:6]  # the passes differ
    # A restart from any step sees the batches an uninterrupted run sees.
    assert stream(4, 9) == whole[4:] and stream(2, 5) == whole[2:5]
    assert stream(0, 9, seed=1) != whole


def test_bad_settings_are_refused():
    examples = language_model_training.next_token_pairs(np.ones((4, 5), "int32"))
    model = keras_tfm.zoo.from_preset("gpt_tiny")
    for name, value in [("epochs", 0), ("batch_size", -1), ("learning_rate", 0)]:
        settings = {"epochs": 1, "batch_size": 2, "learning_rate": 1e-3, name: value}
        with pytest.raises(ValueError, match=f"Received: {name}={value}"):
            training.train_language_model(model, examples, None, **settings)


def test_best_model_checkpoint_keeps_the_lowest_validation_loss(tmp_path):
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    best = callbacks.BestModelCheckpoint(tmp_path)
    best.set_model(model)
    best.on_epoch_end(0, {"val_loss": 2.0})
    best.on_epoch_end(1, {"val_loss": 3.0})  # worse: not written
    assert json.loads((tmp_path / "best.json").read_text()) == {
        "val_loss": 2.0, "epoch": 1}  # fmt: skip
    # A restarted run remembers the best so far.
    again = callbacks.BestModelCheckpoint(tmp_path)
    again.set_model(model)
    again.on_epoch_end(2, {"val_loss": 2.5})
    assert json.loads((tmp_path / "best.json").read_text())["epoch"] == 1
    again.on_epoch_end(3, {"val_loss": 1.0})
    assert json.loads((tmp_path / "best.json").read_text())["epoch"] == 4
    assert keras.models.load_model(tmp_path / "best.keras").count_params() == 3
    off = callbacks.BestModelCheckpoint(tmp_path / "off", enabled=False)
    off.set_model(model)
    off.on_epoch_end(0, {"val_loss": 0.1})
    assert not (tmp_path / "off").exists()


def test_time_budget_stops_at_the_first_epoch_end_past_it(monkeypatch):
    now = [0.0]
    monkeypatch.setattr(callbacks.time, "time", lambda: now[0])
    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
    budget = callbacks.TimeBudget(minutes=1)
    budget.set_model(model)
    model.stop_training = False
    budget.on_train_begin()
    now[0] = 59.0
    budget.on_epoch_end(0)
    assert not model.stop_training
    now[0] = 61.0
    budget.on_epoch_end(1)
    assert model.stop_training and budget.epochs == 2
    with pytest.raises(ValueError, match="minutes"):
        callbacks.TimeBudget(minutes=0)


def test_the_docstring_example_learns_a_pattern_a_unigram_model_cannot():
    result = doctest.testmod(
        language_model_training,
        extraglobs={"np": np, "keras": keras, "keras_tfm": keras_tfm},
        optionflags=doctest.NORMALIZE_WHITESPACE,
    )
    assert result.attempted > 0 and result.failed == 0


def test_numpy_batches_follow_the_seeded_order_rule():
    # What `train_language_model` reads on a backend without tf.data.
    from keras_tfm.training.language_model_training import TokenPairs, _stream

    windows = np.arange(10 * 4).reshape(10, 4)  # window i holds 4i ... 4i + 3
    pairs, per_pass = TokenPairs(windows), 4  # 10 windows in batches of 3
    whole = list(_stream(pairs, 10, 3, 7, 0, 3 * per_pass, per_pass))
    assert len(whole) == 3 * per_pass
    for x, y in whole:
        np.testing.assert_array_equal(y[:, :-1], x[:, 1:])  # the next tokens
    orders = [
        np.concatenate(
            [x[:, 0] // 4 for x, _ in whole[p * per_pass : (p + 1) * per_pass]]
        )
        for p in range(3)
    ]
    assert all(sorted(order) == list(range(10)) for order in orders)
    assert not np.array_equal(orders[0], orders[1])  # each pass its own shuffle
    # A run resumed at step 5 reads what the uninterrupted one read there.
    resumed = list(_stream(pairs, 10, 3, 7, 5, 9, per_pass))
    for (a, _), (b, _) in zip(resumed, whole[5:9], strict=True):
        np.testing.assert_array_equal(a, b)

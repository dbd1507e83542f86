import keras
import numpy as np
import pytest

from keras_tfm.training import TokenAccuracy, TokenCrossEntropy

LABELS = np.array([[1, 2, 3, 0], [4, 4, 0, 0]])  # 0 is padding
# Predicts 1, 0, 3, 1 and 4, 1, 2, 0: right on 1, 3 and the first 4.
PREDICTED = np.array([[1, 0, 3, 1], [4, 1, 2, 0]])
Y_PRED = np.eye(5, dtype="float32")[PREDICTED] * 5.0


def test_counts_only_real_tokens():
    accuracy = TokenAccuracy()
    assert float(accuracy(LABELS, Y_PRED)) == pytest.approx(3 / 5)


def test_accumulates_over_batches_and_resets():
    accuracy = TokenAccuracy()
    accuracy.update_state(LABELS[:1], Y_PRED[:1])  # 2 of 3
    accuracy.update_state(LABELS[1:], Y_PRED[1:])  # 1 of 2
    assert float(accuracy.result()) == pytest.approx(3 / 5)
    accuracy.reset_state()
    assert float(accuracy.result()) == 0.0


def test_sample_weight_and_ignore_class_none():
    weights = np.array([[1, 1, 0, 1], [1, 1, 1, 1]], "float32")
    assert float(TokenAccuracy()(LABELS, Y_PRED, weights)) == pytest.approx(2 / 4)
    # Counting padding, the padded positions predicted 1, 2, 0 hit on one (0).
    assert float(TokenAccuracy(ignore_class=None)(LABELS, Y_PRED)) == pytest.approx(
        4 / 8
    )


def test_in_fit_matches_a_manual_count_and_round_trips():
    model = keras.Sequential(
        [
            keras.Input((4,), dtype="int32"),
            keras.layers.Embedding(5, 8),
            keras.layers.Dense(5),
        ]
    )
    model.compile("adam", TokenCrossEntropy(), metrics=[TokenAccuracy()])
    logs = model.evaluate(LABELS, LABELS, return_dict=True, verbose=0)
    predicted = model.predict(LABELS, verbose=0).argmax(-1)
    real = LABELS != 0
    expected = (predicted == LABELS)[real].mean()
    assert logs["token_accuracy"] == pytest.approx(expected)
    restored = keras.metrics.deserialize(keras.metrics.serialize(TokenAccuracy(3)))
    assert restored.ignore_class == 3


def test_rejects_bad_arguments():
    with pytest.raises(ValueError, match="ignore_class"):
        TokenAccuracy(ignore_class=1.5)
    with pytest.raises(ValueError, match="y_true"):
        TokenAccuracy()(LABELS[0], Y_PRED)

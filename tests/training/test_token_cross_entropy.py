import keras
import numpy as np
import pytest

from keras_tfm.training import TokenCrossEntropy

rng = np.random.default_rng(0)
LOGITS = rng.normal(size=(2, 5, 7)).astype("float32") * 3
LABELS = np.array([[3, 1, 6, 0, 0], [2, 2, 5, 4, 0]])  # 0 is padding
REAL = LABELS != 0


def reference(labels, logits, eps, weights=None):
    """Dense label-smoothed cross-entropy, averaged over the real tokens."""
    log_p = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    target = (1 - eps) * np.eye(logits.shape[-1])[labels] + eps / logits.shape[-1]
    per_token = -(target * log_p).sum(-1)
    w = REAL * (1.0 if weights is None else weights)
    return (per_token * w).sum() / REAL.sum()


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.5])
def test_matches_the_dense_label_smoothed_loss_over_real_tokens(eps):
    loss = TokenCrossEntropy(label_smoothing=eps)
    np.testing.assert_allclose(
        float(loss(LABELS, LOGITS)), reference(LABELS, LOGITS, eps), rtol=1e-5
    )


def test_padding_logits_do_not_change_the_loss():
    changed = LOGITS.copy()
    changed[~REAL] = 100.0 * rng.normal(size=changed[~REAL].shape)
    loss = TokenCrossEntropy(label_smoothing=0.1)
    np.testing.assert_allclose(
        float(loss(LABELS, changed)), float(loss(LABELS, LOGITS)), rtol=1e-6
    )


def test_without_smoothing_equals_keras_sparse_crossentropy_with_ignore_class():
    ours = TokenCrossEntropy()(LABELS, LOGITS)
    keras_loss = keras.losses.SparseCategoricalCrossentropy(
        from_logits=True, ignore_class=0
    )(LABELS, LOGITS)
    np.testing.assert_allclose(float(ours), float(keras_loss), rtol=1e-6)


def test_smoothed_matches_keras_categorical_crossentropy_on_real_tokens():
    eps = 0.2
    onehot = np.eye(7)[LABELS[REAL]]
    keras_loss = keras.losses.CategoricalCrossentropy(
        from_logits=True, label_smoothing=eps
    )(onehot, LOGITS[REAL])
    ours = TokenCrossEntropy(label_smoothing=eps)(LABELS, LOGITS)
    np.testing.assert_allclose(float(ours), float(keras_loss), rtol=1e-5)


def test_probabilities_and_sample_weights():
    probs = np.exp(LOGITS) / np.exp(LOGITS).sum(-1, keepdims=True)
    weights = rng.uniform(size=LABELS.shape).astype("float32")
    loss = TokenCrossEntropy(label_smoothing=0.1, from_logits=False)
    np.testing.assert_allclose(
        float(loss(LABELS, probs, sample_weight=weights)),
        reference(LABELS, LOGITS, 0.1, weights),
        rtol=1e-4,
    )


def test_all_padding_gives_zero_not_nan():
    value = TokenCrossEntropy(label_smoothing=0.1)(np.zeros((2, 5), "int32"), LOGITS)
    assert float(value) == 0.0


def test_ignore_class_none_averages_every_token():
    loss = TokenCrossEntropy(ignore_class=None, label_smoothing=0.1)
    log_p = LOGITS - np.log(np.exp(LOGITS).sum(-1, keepdims=True))
    target = 0.9 * np.eye(7)[LABELS] + 0.1 / 7
    expected = -(target * log_p).sum(-1).mean()
    np.testing.assert_allclose(float(loss(LABELS, LOGITS)), expected, rtol=1e-5)


def test_computes_in_float32_under_mixed_precision():
    keras.config.set_dtype_policy("mixed_float16")
    logits16 = LOGITS.astype("float16")
    value = TokenCrossEntropy(label_smoothing=0.1)(LABELS, logits16)
    assert keras.backend.standardize_dtype(value.dtype) == "float32"
    np.testing.assert_allclose(
        float(value),
        reference(LABELS, logits16.astype("float32"), 0.1),
        rtol=1e-5,
    )


def test_trains_a_model_and_round_trips_config():
    loss = TokenCrossEntropy(ignore_class=0, label_smoothing=0.1)
    restored = keras.losses.deserialize(keras.losses.serialize(loss))
    assert isinstance(restored, TokenCrossEntropy)
    assert restored.get_config() == loss.get_config()
    model = keras.Sequential(
        [
            keras.Input((5,), dtype="int32"),
            keras.layers.Embedding(7, 8),
            keras.layers.Dense(7),
        ]
    )
    model.compile(keras.optimizers.Adam(0.05), loss=loss)
    history = model.fit(LABELS, LABELS, epochs=15, verbose=0)
    assert history.history["loss"][-1] < history.history["loss"][0] - 0.5


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"label_smoothing": 1.0}, "label_smoothing"),
        ({"ignore_class": "pad"}, "ignore_class"),
    ],
)
def test_rejects_bad_arguments(kwargs, name):
    with pytest.raises(ValueError, match=name):
        TokenCrossEntropy(**kwargs)


def test_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match="y_true"):
        TokenCrossEntropy(label_smoothing=0.1)(LABELS[:, :4], LOGITS)

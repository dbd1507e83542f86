import doctest

import keras
import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression

import keras_tfm
from keras_tfm.models import EncoderBackbone, EncoderClassifier
from keras_tfm.training import pooled_features, probe_head

HIDDEN = 8


def classifier(num_classes, pooling="mean"):
    keras.utils.set_random_seed(0)
    backbone = EncoderBackbone(
        vocabulary_size=30,
        num_layers=1,
        num_heads=2,
        hidden_dim=HIDDEN,
        intermediate_dim=16,
        max_sequence_length=12,
        dropout=0.3,  # the features must come from inference mode
    )
    return EncoderClassifier(backbone, num_classes, pooling=pooling, dropout=0.5)


def data(num_rows, num_classes, seed=0):
    """Batches of (ids with trailing padding, labels)."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, 30, (num_rows, 10))
    lengths = rng.integers(3, 11, num_rows)
    ids[np.arange(10) >= lengths[:, None]] = 0
    labels = rng.integers(0, num_classes, num_rows)
    return [(ids[i : i + 8], labels[i : i + 8]) for i in range(0, num_rows, 8)]


def mean_pool_reference(model, ids):
    """float64 mean over the real tokens of the backbone's hidden states."""
    hidden = keras.ops.convert_to_numpy(model.backbone(ids)).astype("float64")
    mask = (ids != 0)[..., None]
    return (hidden * mask).sum(1) / mask.sum(1)


@pytest.mark.parametrize("pooling", ["mean", "cls"])
def test_features_are_what_the_head_reads(pooling):
    model = classifier(3, pooling)
    batches = data(20, 3)
    features, labels = pooled_features(model, batches)
    assert features.shape == (20, HIDDEN) and features.dtype == np.float32
    np.testing.assert_array_equal(labels, np.concatenate([y for _, y in batches]))
    ids = np.concatenate([x for x, _ in batches])
    # The head applied to the features gives the model's logits.
    kernel, bias = (w.numpy() for w in model.classifier.weights)
    np.testing.assert_allclose(
        features @ kernel + bias, model.predict(ids, verbose=0), atol=1e-5
    )
    if pooling == "mean":
        np.testing.assert_allclose(features, mean_pool_reference(model, ids), atol=1e-5)


def test_padding_does_not_change_the_features():
    model = classifier(3)
    ids = np.array([[5, 6, 7, 0, 0]])
    wider = np.array([[5, 6, 7, 0, 0, 0, 0, 0]])
    a, _ = pooled_features(model, [(ids, np.array([0]))])
    b, _ = pooled_features(model, [(wider, np.array([0]))])
    np.testing.assert_allclose(a, b, atol=1e-6)


def test_the_model_predicts_what_the_probe_predicts():
    model = classifier(4)
    batches = data(64, 4)
    features, labels = pooled_features(model, batches)
    probe = probe_head(model, features, labels, c=10.0)
    ids = np.concatenate([x for x, _ in batches])
    logits = model.predict(ids, verbose=0).astype("float64")
    probabilities = np.exp(logits - logits.max(-1, keepdims=True))
    probabilities /= probabilities.sum(-1, keepdims=True)
    # An independent fit of the same regression on the same features.
    reference = LogisticRegression(C=10.0, max_iter=2000).fit(features, labels)
    np.testing.assert_allclose(
        probabilities, reference.predict_proba(features), atol=1e-4
    )
    np.testing.assert_array_equal(logits.argmax(-1), probe.predict(features))


def test_an_absent_class_gets_a_low_prior_and_binary_probes_map_to_two_logits():
    model = classifier(5)
    batches = data(48, 2)  # labels 0 and 1 only: a binary regression
    features, labels = pooled_features(model, batches)
    probe = probe_head(model, features, labels)
    logits = model.predict(np.concatenate([x for x, _ in batches]), verbose=0)
    # softmax over the two present classes is the binary model's probability.
    pair = logits[:, :2].astype("float64")
    p1 = 1 / (1 + np.exp(pair[:, 0] - pair[:, 1]))
    np.testing.assert_allclose(p1, probe.predict_proba(features)[:, 1], atol=1e-5)
    kernel, bias = (w.numpy() for w in model.classifier.weights)
    assert not kernel[:, 2:].any()
    assert (bias[2:] < bias[:2].min()).all()


def test_a_mixed_precision_model_gets_the_probe_too():
    policy = keras.config.dtype_policy()
    keras.config.set_dtype_policy("mixed_bfloat16")
    try:
        model = classifier(3)
    finally:
        keras.config.set_dtype_policy(policy)
    batches = data(32, 3)
    features, labels = pooled_features(model, batches)
    probe = probe_head(model, features, labels)
    logits = model.predict(np.concatenate([x for x, _ in batches]), verbose=0)
    # bfloat16 features: the decisions may differ only where the probe is unsure.
    agree = (logits.argmax(-1) == probe.predict(features)).mean()
    assert agree >= 0.9


@pytest.mark.parametrize(
    "features, labels, match",
    [
        (np.zeros((4, HIDDEN + 1)), np.array([0, 1, 0, 1]), "shape"),
        (np.zeros((4, HIDDEN)), np.array([0, 1, 0]), "one class id per row"),
        (np.zeros((4, HIDDEN)), np.array([0, 1, 0, 3]), r"\[0, 3\)"),
        (np.zeros((4, HIDDEN)), np.array([0.0, 1.0, 0.0, 1.0]), "integer"),
        (np.zeros((4, HIDDEN)), np.array([1, 1, 1, 1]), "two classes"),
    ],
)
def test_bad_probe_input_is_named(features, labels, match):
    with pytest.raises(ValueError, match=match):
        probe_head(classifier(3), features, labels)


def test_a_head_with_adapters_is_refused():
    model = classifier(3)
    model.classifier.enable_lora(2)
    with pytest.raises(ValueError, match="before `quantize` or `enable_lora`"):
        probe_head(model, np.zeros((4, HIDDEN)), np.array([0, 1, 2, 0]))


def test_a_dataset_without_labels_is_refused():
    with pytest.raises(ValueError, match=r"\(inputs, labels\)"):
        pooled_features(classifier(3), [np.zeros((2, 4), "int32")])
    with pytest.raises(ValueError, match="empty"):
        pooled_features(classifier(3), [])


def test_docstring_examples():
    from keras_tfm.training import linear_probe as module

    result = doctest.testmod(
        module, extraglobs={"np": np, "keras": keras, "keras_tfm": keras_tfm}
    )
    assert result.attempted > 0 and result.failed == 0

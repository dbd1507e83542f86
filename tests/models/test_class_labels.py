"""`EncoderClassifier.fit` refuses label ids outside [0, num_classes).

Without the check, a bad label fails deep in the graph, or under XLA not at
all (the loss becomes NaN): `test_xla_alone_lets_a_bad_label_through` keeps
that premise checked.
"""

import doctest

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_tfm import models, zoo
from keras_tfm.models import class_labels

IDS = np.random.default_rng(0).integers(1, 60, size=(8, 6)).astype("int32")
GOOD = np.array([0, 1, 2, 1, 0, 1, 2, 0])
BAD = np.array([0, 1, 2, 1, 0, 1, 2, 3])  # the last batch of 4 holds the 3


def classifier(jit_compile=True, loss="sparse_categorical_crossentropy"):
    model = models.EncoderClassifier(
        backbone=zoo.from_preset("bert_tiny_test"), num_classes=3
    )
    model.compile("adam", loss, jit_compile=jit_compile)
    return model


def dataset(labels):
    return tf.data.Dataset.from_tensor_slices((IDS, labels)).batch(4)


def test_xla_alone_lets_a_bad_label_through():
    model = classifier()
    # keras.Model.evaluate, not the checked one: the XLA-compiled step
    # computes a NaN loss instead of raising.
    loss = keras.Model.evaluate(model, IDS, BAD, verbose=0)
    assert np.isnan(loss)


def test_array_labels_are_checked_before_training():
    model = classifier()
    before = [w.numpy().copy() for w in model.trainable_weights]
    with pytest.raises(ValueError, match=r"class ids in \[0, 3\).*from 0 to 3"):
        model.fit(IDS, BAD, verbose=0)
    with pytest.raises(ValueError, match="`validation_data labels`.*from 0 to 3"):
        model.fit(IDS, GOOD, validation_data=(IDS, BAD), verbose=0)
    with pytest.raises(ValueError, match="from -1 to 2"):
        model.evaluate(IDS, GOOD - (GOOD == 0), verbose=0)
    for old, new in zip(before, model.trainable_weights, strict=True):
        np.testing.assert_array_equal(old, new.numpy())


def test_dataset_labels_are_checked_in_every_batch_under_xla():
    model = classifier(jit_compile=True)
    before = model.classifier.kernel.numpy().copy()
    with pytest.raises(ValueError, match=r"\[0, 3\).*in a batch.*from 0 to 3"):
        model.fit(dataset(BAD), shuffle=False, verbose=0)
    # The first batch (good labels) trained; the second stopped before its step.
    kernel = model.classifier.kernel.numpy()
    assert np.all(np.isfinite(kernel)) and not np.array_equal(kernel, before)


def test_one_hot_and_soft_targets_are_not_class_ids():
    one_hot = np.eye(3, dtype="float32")[GOOD]
    class_labels.check_class_labels(one_hot, num_classes=3)
    targets = tf.data.Dataset.from_tensor_slices((IDS, one_hot)).batch(4)
    assert class_labels.with_checked_labels(targets, num_classes=3) is targets
    # Float class ids of shape (batch,) are checked.
    with pytest.raises(ValueError, match="from 0 to 3"):
        class_labels.check_class_labels(BAD.astype("float32"), num_classes=3)


def test_docstring_example():
    result = doctest.testmod(class_labels, extraglobs={"np": np})
    assert result.attempted > 0 and result.failed == 0

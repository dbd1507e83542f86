"""Class labels checked against `num_classes` before they reach the loss.

A label id outside [0, num_classes) otherwise fails deep in the graph
(`InvalidArgumentError: Graph execution error` from the sparse cross-entropy
kernel) or, under XLA (`jit_compile=True`), not at all: the loss silently
becomes NaN, because XLA drops `Assert` ops. So the check runs where XLA does
not: eagerly in NumPy for array labels, and inside the `tf.data` pipeline
(which runs outside the compiled step) for datasets. Both raise a `ValueError`
that names the labels and the valid range. `keras_tfm.models.Task` applies
them in `fit` and `evaluate`: class ids for classifiers, token ids (against
the vocabulary) for language models.

Checked: integer labels, and float labels of shape (batch,) or (batch, 1).
Float labels whose last axis is `num_classes` (one-hot or soft targets) are
left alone, as are Python generators and `PyDataset`s (they cannot be wrapped
without consuming them).
"""

import contextlib
import re
import sys

import numpy as np

from keras_tfm._optional import tensorflow as tf
from keras_tfm._optional import tensorflow_loaded

# Marks the assertion of the tf.data check, so that `fit` can turn the
# InvalidArgumentError it surfaces as into the ValueError an eager check raises.
_MARKER = "keras_tfm class label check:"
_ASSERTION = re.compile(
    re.escape(_MARKER)
    + r"\] \[(?P<name>[^\]]*)\] \[(?P<low>-?\d+)\] \[(?P<high>-?\d+)\]"
)


def _range_error(name, num_classes, low, high, where="", kind="class"):
    if kind == "token":
        return ValueError(
            f"`{name}` must hold token ids in [0, {num_classes}) for "
            f"vocabulary_size={num_classes}{where}. Received: labels from {low} "
            f"to {high}. (Labels from another tokenizer?)"
        )
    return ValueError(
        f"`{name}` must hold class ids in [0, {num_classes}) for "
        f"num_classes={num_classes}{where}. Received: labels from {low} to "
        f"{high}. (Labels counted from 1, or a `num_classes` too small?)"
    )


def _is_class_id_shape(shape, dtype, num_classes):
    if np.issubdtype(np.dtype(dtype), np.integer):
        return True
    if not np.issubdtype(np.dtype(dtype), np.floating):
        return False
    shape = tuple(shape)
    return len(shape) == 1 or (len(shape) >= 1 and shape[-1] == 1 != num_classes)


def check_class_labels(labels, num_classes, name="y", kind="class"):
    """Raises a ValueError if array `labels` hold an id outside [0, num_classes).

    Example:
    >>> check_class_labels(np.array([0, 2, 1]), num_classes=3)
    >>> check_class_labels(np.array([1, 3]), num_classes=3)
    Traceback (most recent call last):
    ...
    ValueError: `y` must hold class ids in [0, 3) for num_classes=3. Received: labels from 1 to 3. (Labels counted from 1, or a `num_classes` too small?)
    """  # noqa: E501
    if labels is None or isinstance(labels, dict):
        return
    array = np.asarray(labels)
    if array.size == 0 or not _is_class_id_shape(array.shape, array.dtype, num_classes):
        return
    low, high = array.min(), array.max()
    if low < 0 or high >= num_classes:
        raise _range_error(name, num_classes, _plain(low), _plain(high), "", kind)


def _plain(value):
    value = value.item()
    return int(value) if float(value).is_integer() else value


def with_checked_labels(dataset, num_classes, name="y"):
    """`dataset` of (x, y[, sample_weight]) with every batch's `y` checked.

    The check is a `tf.debugging.Assert` inside `dataset.map`, so it runs in
    the input pipeline, also when the training step is XLA-compiled.
    """
    spec = dataset.element_spec
    if not isinstance(spec, tuple) or len(spec) < 2:
        return dataset
    label_spec = spec[1]
    if not isinstance(label_spec, tf.TensorSpec) or not _is_class_id_shape(
        label_spec.shape, label_spec.dtype.as_numpy_dtype, num_classes
    ):
        return dataset

    def check(*element):
        labels = element[1]
        ids = tf.cast(labels, tf.float64)
        low = tf.cast(tf.reduce_min(ids), tf.int64)
        high = tf.cast(tf.reduce_max(ids), tf.int64)
        in_range = tf.logical_or(
            tf.equal(tf.size(ids), 0),
            tf.logical_and(low >= 0, tf.reduce_max(ids) < num_classes),
        )
        assertion = tf.debugging.Assert(in_range, [_MARKER, name, low, high])
        with tf.control_dependencies([assertion]):
            labels = tf.identity(labels)
        return (element[0], labels, *element[2:])

    return dataset.map(check)


@contextlib.contextmanager
def label_errors(num_classes, kind="class"):
    """Re-raises the dataset check's InvalidArgumentError as a ValueError."""
    try:
        yield
    except Exception as error:
        # Only a TensorFlow error can be the check's, and TensorFlow is not
        # imported to find out (without it, `tf.errors` would raise anew).
        if not tensorflow_loaded() or not isinstance(
            error, sys.modules["tensorflow"].errors.InvalidArgumentError
        ):
            raise
        match = _ASSERTION.search(str(error))
        if match is None:
            raise
        raise _range_error(
            match["name"],
            num_classes,
            int(match["low"]),
            int(match["high"]),
            " (in a batch of the dataset)",
            kind,
        ) from None

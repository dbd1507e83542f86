"""Running a text classifier over a whole labelled dataset.

Raw strings go through the classifier itself: `EncoderClassifier.predict`
takes a list of strings and `EncoderClassifier.classify` returns class
names (what `classify_texts` here used to do).
"""

import numpy as np


def predict_with_labels(model, dataset):
    """Runs `model` over a bucketed `(x, y)` dataset; returns (logits, y).

    Bucketing reorders the examples, so the labels are collected from the
    same batches as the predictions rather than from the original order.
    """
    logits, labels = [], []
    for x, y in dataset:
        logits.append(np.asarray(model(x, training=False)))
        labels.append(np.asarray(y))
    if not logits:
        raise ValueError("`dataset` is empty. Received: a dataset with no batches.")
    return np.concatenate(logits), np.concatenate(labels)

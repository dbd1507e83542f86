"""Running a text classifier: raw strings in, classes out; a whole dataset.

These used to live beside the fortunes corpus loader; they belong with the
model they run. `classify_texts` is the function behind the planned
`EncoderClassifier.classify(texts)` method, which should call it.
"""

import numpy as np

from keras_tfm.data.tokenizers import encode_for_classification


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


def classify_texts(model, texts, class_names=None):
    """Classifies raw strings with an `EncoderClassifier` that holds its tokenizer.

    Args:
        model: an `EncoderClassifier` built with `tokenizer=` (e.g. the
            "fortunes_classifier" preset).
        texts: a list of strings.
        class_names: optional names of the classes, to return names.

    Returns:
        `(predictions, probabilities)`: class indices (or names) and the
        softmax probabilities (len(texts), num_classes).

    Example:
    >>> model = keras_tfm.zoo.from_preset("fortunes_classifier")
    >>> names = keras_tfm.zoo.preset_labels("fortunes_classifier")
    >>> predictions, probabilities = classify_texts(
    ...     model, ["Real programmers use vi."], names)
    >>> probabilities.shape == (1, len(names))
    True
    """
    if getattr(model, "tokenizer", None) is None:
        raise ValueError(
            "`model` must hold its tokenizer (EncoderClassifier(..., tokenizer=...)). "
            f"Received: a {type(model).__name__} without one"
        )
    length = model.backbone.max_sequence_length
    ids = encode_for_classification(model.tokenizer, list(texts), length)
    ids = ids[:, : max(3, int((ids != 0).sum(axis=1).max()))]
    logits = np.asarray(model(ids, training=False), dtype="float64")
    probabilities = np.exp(logits - logits.max(axis=1, keepdims=True))
    probabilities /= probabilities.sum(axis=1, keepdims=True)
    predictions = probabilities.argmax(axis=1)
    if class_names is not None:
        predictions = [class_names[i] for i in predictions]
    return predictions, probabilities

"""Linear-probe initialisation of a classifier's head (the LP of LP-FT)."""

import numpy as np
from keras import ops

from keras_tfm.validation import check_positive_float


def pooled_features(classifier, dataset):
    """The pooled features of an `EncoderClassifier` and the labels, in order.

    Runs `classifier.pool` (inference mode: no dropout) over a dataset of
    `(inputs, labels)` batches, e.g. what `keras_tfm.data.classification_dataset`
    gives.

    Returns:
        `(features, labels)`: float32 (n, hidden_dim) and int (n,) arrays.

    Example:
    >>> backbone = keras_tfm.models.EncoderBackbone(
    ...     vocabulary_size=50, num_layers=1, num_heads=2, hidden_dim=16,
    ...     intermediate_dim=32, max_sequence_length=8)
    >>> model = keras_tfm.models.EncoderClassifier(backbone, 3, pooling="mean")
    >>> data = [(np.array([[2, 5, 7, 0], [3, 4, 0, 0]]), np.array([0, 2]))]
    >>> features, labels = keras_tfm.training.pooled_features(model, data)
    >>> features.shape, labels.tolist()
    ((2, 16), [0, 2])
    """
    features, labels = [], []
    for batch in dataset:
        if not isinstance(batch, tuple | list) or len(batch) < 2:
            raise ValueError(
                "`dataset` must yield (inputs, labels) batches. Received: a "
                f"batch of type {type(batch).__name__}"
            )
        inputs, batch_labels = batch[0], batch[1]
        pooled = classifier.pool(inputs, training=False)
        features.append(ops.convert_to_numpy(ops.cast(pooled, "float32")))
        labels.append(np.asarray(batch_labels).reshape(-1))
    if not features:
        raise ValueError("`dataset` is empty: there is nothing to fit a probe on.")
    return np.concatenate(features), np.concatenate(labels)


def probe_head(classifier, features, labels, c=1.0, max_iter=2000):
    """Fits logistic regression on frozen features and copies it into the head.

    Linear probing, then fine-tuning (LP-FT; Kumar et al. 2022): a head
    fitted on the frozen backbone's features first means fine-tuning starts
    from the probe's predictions, and the backbone's first updates are not
    driven by a random head. scikit-learn's multinomial model scores
    `features @ coef_.T + intercept_`, exactly the `classifier` Dense layer's
    logits, so afterwards the model (in inference) predicts what the fitted
    regression predicts. A class absent from `labels` gets zero weights and
    an intercept 5 below the smallest fitted one (a prior near zero); with
    two classes, the binary model's logit is split evenly between them.

    Args:
        classifier: an `EncoderClassifier` (its `classifier` layer is set).
        features: (n, hidden_dim) features of `classifier.pool`, e.g. from
            `pooled_features`.
        labels: (n,) class ids in [0, classifier.num_classes).
        c: inverse L2 strength of the regression (scikit-learn's `C`).
        max_iter: the solver's iteration limit.

    Returns:
        The fitted `sklearn.linear_model.LogisticRegression`.

    Example:
    >>> backbone = keras_tfm.models.EncoderBackbone(
    ...     vocabulary_size=50, num_layers=1, num_heads=2, hidden_dim=16,
    ...     intermediate_dim=32, max_sequence_length=8)
    >>> model = keras_tfm.models.EncoderClassifier(backbone, 3, pooling="mean")
    >>> data = [(np.array([[2, 5, 7, 0], [3, 4, 0, 0], [9, 9, 9, 9]]),
    ...          np.array([0, 2, 1]))]
    >>> features, labels = keras_tfm.training.pooled_features(model, data)
    >>> probe = keras_tfm.training.probe_head(model, features, labels, c=100.0)
    >>> logits = model.predict(data[0][0], verbose=0)
    >>> bool((logits.argmax(-1) == probe.predict(features)).all())
    True
    """
    from sklearn.linear_model import LogisticRegression

    check_positive_float("c", c)
    if len(classifier.classifier.weights) != 2:
        raise ValueError(
            "The head must be a plain kernel and bias to be set from a probe: "
            "probe before `quantize` or `enable_lora`. Received: a head with "
            f"weights {[w.name for w in classifier.classifier.weights]}"
        )
    features = np.asarray(features)
    labels = np.asarray(labels)
    num_classes, hidden_dim = classifier.num_classes, classifier.backbone.hidden_dim
    if features.ndim != 2 or features.shape[1] != hidden_dim:
        raise ValueError(
            f"`features` must have shape (n, {hidden_dim}) (what "
            f"`classifier.pool` gives). Received: shape {features.shape}"
        )
    if labels.shape != (len(features),):
        raise ValueError(
            f"`labels` must hold one class id per row of `features` "
            f"({len(features)}). Received: shape {labels.shape}"
        )
    if (
        not np.issubdtype(labels.dtype, np.integer)
        or not ((labels >= 0) & (labels < num_classes)).all()
    ):
        raise ValueError(
            f"`labels` must be integer class ids in [0, {num_classes}). "
            f"Received: {np.unique(labels)[:10].tolist()}"
        )
    if len(np.unique(labels)) < 2:
        raise ValueError(
            "`labels` must hold at least two classes to fit a probe. Received: "
            f"only class {np.unique(labels).tolist()}"
        )
    probe = LogisticRegression(C=c, max_iter=max_iter).fit(features, labels)
    coef, intercept = probe.coef_, probe.intercept_
    if len(probe.classes_) == 2:  # binary: one logit w.x + b for the second class
        coef = np.concatenate([-coef / 2, coef / 2])
        intercept = np.concatenate([-intercept / 2, intercept / 2])
    kernel = np.zeros((hidden_dim, num_classes))
    bias = np.full(num_classes, intercept.min() - 5.0)
    kernel[:, probe.classes_] = coef.T
    bias[probe.classes_] = intercept
    classifier.classifier.set_weights([kernel, bias])
    return probe

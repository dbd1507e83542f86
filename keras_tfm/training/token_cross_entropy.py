import keras
from keras import ops

from keras_tfm._keras_compat import set_keras_mask
from keras_tfm.training._checks import check_ignore_class
from keras_tfm.validation import check_label_shape, check_rate


def _token_cross_entropy(y_true, y_pred, ignore_class, label_smoothing, from_logits):
    """Per-token loss, zero on ignored tokens, with their mask attached."""
    y_pred = ops.convert_to_tensor(y_pred, "float32")
    y_true = ops.convert_to_tensor(y_true)
    if len(y_true.shape) == len(y_pred.shape) and y_true.shape[-1] == 1:
        y_true = ops.squeeze(y_true, axis=-1)
    check_label_shape(y_true, y_pred, "y_pred")
    # Keras' own loss masks `ignore_class` (zero loss plus a Keras mask, which
    # the `Loss` reduction turns into a mean over the unmasked tokens).
    nll = keras.losses.sparse_categorical_crossentropy(
        y_true, y_pred, from_logits=from_logits, ignore_class=ignore_class
    )
    if not label_smoothing:
        return nll
    # mean_v(-log p_v) without a one-hot: logsumexp(z) - mean_v(z).
    if from_logits:
        uniform = ops.logsumexp(y_pred, axis=-1) - ops.mean(y_pred, axis=-1)
    else:
        probs = y_pred / ops.sum(y_pred, axis=-1, keepdims=True)
        probs = ops.clip(probs, keras.config.epsilon(), 1.0)
        uniform = -ops.mean(ops.log(probs), axis=-1)
    loss = (1.0 - label_smoothing) * nll + label_smoothing * uniform
    if ignore_class is None:
        return loss
    valid = ops.not_equal(y_true, ops.cast(ignore_class, y_true.dtype))
    loss = ops.where(valid, loss, 0.0)
    set_keras_mask(loss, valid)
    return loss


@keras.saving.register_keras_serializable(package="keras_tfm")
class TokenCrossEntropy(keras.losses.Loss):
    """Sparse cross-entropy over token sequences, ignoring padding.

        loss_t = (1 - eps) * (-log p(y_t)) + eps * mean_v(-log p(v))
        loss   = sum_t loss_t * w_t / #{t : y_t != ignore_class}

    which is the cross-entropy against the label-smoothed target
    `(1 - eps) * onehot(y) + eps / V` (Szegedy et al., 2016; eps=0.1 in the
    Transformer paper), computed from `logsumexp` so no (batch, seq, V)
    one-hot is ever built. Without smoothing it is exactly
    `keras.losses.SparseCategoricalCrossentropy(ignore_class=...)`, which it
    calls. Tokens whose label is `ignore_class` contribute nothing and are
    not counted; a batch of padding only has loss 0, not NaN. Any Keras mask
    on `y_pred` is honoured as well. The loss is computed in float32 even
    under a mixed-precision policy. Labels outside `[0, V)` are an error of
    the TensorFlow kernel on CPU (and are not checked on GPU).

    Args:
        ignore_class: the label to ignore (the padding id), or None.
        label_smoothing: eps in [0, 1).
        from_logits: whether `y_pred` are logits (default) or probabilities.
        reduction: as for `keras.losses.Loss`.
        name: as for `keras.losses.Loss`.

    Call arguments:
        y_true: integer labels, (batch, seq).
        y_pred: logits or probabilities, (batch, seq, vocabulary_size).
        sample_weight: optional weights, (batch, seq).

    Returns:
        The mean loss over real tokens, a float32 scalar.

    Example:
    >>> loss = keras_tfm.training.TokenCrossEntropy(label_smoothing=0.1)
    >>> y_true = np.array([[3, 1, 0]])  # 0 is padding
    >>> y_pred = np.random.normal(size=(1, 3, 5)).astype("float32")
    >>> float(loss(y_true, y_pred)) > 0
    True
    """

    def __init__(
        self,
        ignore_class=0,
        label_smoothing=0.0,
        from_logits=True,
        reduction="sum_over_batch_size",
        name="token_cross_entropy",
    ):
        # Always float32: mixed-precision logits are upcast before the softmax.
        super().__init__(name=name, reduction=reduction, dtype="float32")
        self.ignore_class = check_ignore_class(ignore_class)
        self.label_smoothing = check_rate("label_smoothing", label_smoothing)
        self.from_logits = bool(from_logits)

    def call(self, y_true, y_pred):
        return _token_cross_entropy(
            y_true,
            y_pred,
            ignore_class=self.ignore_class,
            label_smoothing=self.label_smoothing,
            from_logits=self.from_logits,
        )

    def get_config(self):
        return {
            "ignore_class": self.ignore_class,
            "label_smoothing": self.label_smoothing,
            "from_logits": self.from_logits,
            "reduction": self.reduction,
            "name": self.name,
        }

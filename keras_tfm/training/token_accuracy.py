import keras
from keras import ops

from keras_tfm._keras_compat import get_keras_mask
from keras_tfm.training._checks import check_ignore_class, real_token_weights


@keras.saving.register_keras_serializable(package="keras_tfm")
class TokenAccuracy(keras.metrics.Metric):
    """Next-token accuracy over real tokens: padding is neither right nor wrong.

        accuracy = sum_t w_t * [argmax(y_pred_t) == y_t] / sum_t w_t,
        w_t = sample_weight_t * [y_t != ignore_class] * mask_t

    accumulated over the batches of an epoch. Any Keras mask on `y_pred` is
    honoured. The result is 0 until a real token has been seen.

    Args:
        ignore_class: the label to ignore (the padding id), or None.
        name: as for `keras.metrics.Metric`.
        dtype: as for `keras.metrics.Metric`.

    Call arguments:
        y_true: integer labels, (batch, seq).
        y_pred: logits or probabilities, (batch, seq, vocabulary_size).
        sample_weight: optional weights, (batch, seq).

    Example:
    >>> accuracy = keras_tfm.training.TokenAccuracy()
    >>> y_pred = np.eye(4)[None, [1, 2, 3]]  # predicts 1, 2, 3
    >>> accuracy(np.array([[1, 3, 0]]), y_pred).numpy()  # 0 is padding
    0.5
    """

    def __init__(self, ignore_class=0, name="token_accuracy", dtype="float32"):
        super().__init__(name=name, dtype=dtype)
        self.ignore_class = check_ignore_class(ignore_class)
        self.correct = self.add_variable((), "zeros", name="correct", dtype=dtype)
        self.count = self.add_variable((), "zeros", name="count", dtype=dtype)

    def update_state(self, y_true, y_pred, sample_weight=None):
        mask = get_keras_mask(y_pred)
        y_true = ops.convert_to_tensor(y_true)
        if len(y_true.shape) == len(y_pred.shape) and y_true.shape[-1] == 1:
            y_true = ops.squeeze(y_true, axis=-1)
        if len(y_true.shape) != len(y_pred.shape) - 1:
            raise ValueError(
                "`y_true` must have the shape of `y_pred` without its last axis. "
                f"Received: y_true.shape={tuple(y_true.shape)}, "
                f"y_pred.shape={tuple(y_pred.shape)}"
            )
        weights = real_token_weights(
            y_true, self.ignore_class, sample_weight, mask, ops
        )
        predicted = ops.argmax(y_pred, axis=-1)
        hits = ops.cast(
            ops.equal(predicted, ops.cast(y_true, predicted.dtype)), "float32"
        )
        self.correct.assign_add(ops.cast(ops.sum(hits * weights), self.dtype))
        self.count.assign_add(ops.cast(ops.sum(weights), self.dtype))

    def result(self):
        return ops.divide_no_nan(self.correct, self.count)

    def reset_state(self):
        self.correct.assign(0.0)
        self.count.assign(0.0)

    def get_config(self):
        return {
            "ignore_class": self.ignore_class,
            "name": self.name,
            "dtype": self.dtype,
        }

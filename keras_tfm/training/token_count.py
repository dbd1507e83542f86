import keras
from keras import ops

from keras_tfm.training._checks import check_ignore_class


@keras.saving.register_keras_serializable(package="keras_tfm")
class TokenCount(keras.metrics.Metric):
    """The number of real (non-padding) label tokens seen this epoch.

        count = sum over batches of #{t : y_t != ignore_class}

    Sample weights are ignored: this counts tokens, it does not weigh them.
    Add it to `compile(metrics=...)` and `ThroughputCallback` reads it to
    report real tokens per second. Counts are exact up to 2^24 tokens per
    epoch (float32) and within 1e-7 relative beyond.

    Args:
        ignore_class: the padding label, or None to count every position.
        name: as for `keras.metrics.Metric`.
        dtype: as for `keras.metrics.Metric`.

    Call arguments:
        y_true: integer labels, (batch, seq).
        y_pred: the model outputs (unused).

    Example:
    >>> count = keras_tfm.training.TokenCount()
    >>> count(np.array([[5, 6, 0], [7, 0, 0]]), np.zeros((2, 3, 9))).numpy()
    3.0
    """

    def __init__(self, ignore_class=0, name="num_tokens", dtype="float32"):
        super().__init__(name=name, dtype=dtype)
        self.ignore_class = check_ignore_class(ignore_class)
        self.total = self.add_variable((), "zeros", name="total", dtype=dtype)

    def update_state(self, y_true, y_pred=None, sample_weight=None):
        y_true = ops.convert_to_tensor(y_true)
        if self.ignore_class is None:
            count = ops.size(y_true)
        else:
            real = ops.not_equal(y_true, ops.cast(self.ignore_class, y_true.dtype))
            count = ops.sum(ops.cast(real, "int32"))
        self.total.assign_add(ops.cast(count, self.dtype))

    def result(self):
        return ops.convert_to_tensor(self.total)

    def reset_state(self):
        self.total.assign(0.0)

    def get_config(self):
        return {
            "ignore_class": self.ignore_class,
            "name": self.name,
            "dtype": self.dtype,
        }

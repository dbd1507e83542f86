import keras
from keras import ops

from keras_tfm.validation import check_positive_float, check_positive_int


@keras.saving.register_keras_serializable(package="keras_tfm")
class TransformerSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """The warm-up then inverse-square-root learning rate of the Transformer.

        lr(step) = scale * hidden_dim^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)

    (Vaswani et al., 2017, eq. 3). The rate grows linearly for `warmup_steps`
    steps, peaks at `scale * (hidden_dim * warmup_steps)^-0.5`, then decays
    as `step^-0.5`. The paper counts steps from 1 while an optimizer's
    `iterations` start at 0, so the schedule is evaluated at
    `step = iterations + 1`: the first update uses the paper's step 1.

    Args:
        hidden_dim: the model width (`d_model`, 512 in the paper's base model).
        warmup_steps: the number of warm-up steps (4000 in the paper).
        scale: a constant factor on the whole schedule.

    Call arguments:
        step: the optimizer's iteration count (0-based), a scalar.

    Returns:
        The learning rate, a float32 scalar.

    Example:
    >>> schedule = keras_tfm.training.TransformerSchedule(hidden_dim=512)
    >>> optimizer = keras.optimizers.Adam(schedule, beta_2=0.98, epsilon=1e-9)
    >>> float(schedule(3999))  # the peak, at the paper's step 4000
    0.000698771...
    """

    def __init__(self, hidden_dim, warmup_steps=4000, scale=1.0):
        self.hidden_dim = check_positive_int("hidden_dim", hidden_dim)
        self.warmup_steps = check_positive_int("warmup_steps", warmup_steps)
        self.scale = check_positive_float("scale", scale)

    def __call__(self, step):
        step = ops.cast(step, "float32") + 1.0
        warmup = ops.cast(self.warmup_steps, "float32")
        rate = ops.minimum(ops.rsqrt(step), step * warmup**-1.5)
        return self.scale * self.hidden_dim**-0.5 * rate

    def get_config(self):
        return {
            "hidden_dim": self.hidden_dim,
            "warmup_steps": self.warmup_steps,
            "scale": self.scale,
        }

import keras
import numpy as np
from keras import ops

from keras_tfm.layers.positions import is_per_row, positions
from keras_tfm.validation import check_positive_float, check_rank


@keras.saving.register_keras_serializable(package="keras_tfm")
class RotaryEmbedding(keras.layers.Layer):
    """Rotary position embedding (RoPE) for queries and keys.

    Rotates each pair of features (x_i, x_{i + H/2}) of a head of size H at
    position `pos` by the angle pos * theta_i, theta_i =
    max_wavelength^(-2i / H) (the "half-split" pairing of GPT-NeoX and
    LLaMA). The dot product of a rotated query and key then depends only on
    their distance. It has no weights; `MultiHeadSelfAttention(use_rotary=True)`
    applies it to queries and keys.

    Args:
        max_wavelength: the base of the wavelengths, 10000 in the paper.

    Call arguments:
        inputs: a tensor of shape (batch, seq, heads, head_dim), head_dim even.
        start_index: the position of the first token (cached decoding): an
            int, a scalar tensor, or a (batch,) vector with one per row.

    Returns:
        The rotated tensor, same shape and dtype.

    Example:
    >>> rope = keras_tfm.layers.RotaryEmbedding()
    >>> rope(np.ones((1, 4, 2, 8), "float32")).shape
    TensorShape([1, 4, 2, 8])

    Reference: Su et al., 2021, "RoFormer".
    """

    def __init__(self, max_wavelength=10000, **kwargs):
        super().__init__(**kwargs)
        self.max_wavelength = check_positive_float("max_wavelength", max_wavelength)

    def call(self, inputs, start_index=0):
        check_rank("inputs", inputs, 4, "(batch, seq, heads, head_dim)")
        head_dim = inputs.shape[-1]
        if head_dim % 2:
            raise ValueError(
                "RotaryEmbedding needs an even head dimension. Received: "
                f"inputs.shape={tuple(inputs.shape)}"
            )
        inverse_frequency = self.max_wavelength ** (
            -np.arange(0, head_dim, 2) / head_dim
        )
        position = positions(start_index, ops.shape(inputs)[1])  # (S,) or (B, S)
        angles = ops.expand_dims(position, -1) * inverse_frequency.astype("float32")
        angles = ops.concatenate([angles, angles], axis=-1)  # (S, H) or (B, S, H)
        if not is_per_row(start_index):
            angles = angles[None]
        cos = ops.cast(ops.cos(angles)[:, :, None, :], inputs.dtype)
        sin = ops.cast(ops.sin(angles)[:, :, None, :], inputs.dtype)
        first, second = ops.split(inputs, 2, axis=-1)
        rotated_half = ops.concatenate([-second, first], axis=-1)
        return inputs * cos + rotated_half * sin

    def compute_output_shape(self, input_shape):
        # `input_shape`: the name Keras records for layers without build().
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update({"max_wavelength": self.max_wavelength})
        return config

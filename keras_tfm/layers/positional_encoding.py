import keras
import numpy as np
from keras import ops

from keras_tfm.layers.positions import positions
from keras_tfm.validation import check_positive_float, check_rank


@keras.saving.register_keras_serializable(package="keras_tfm")
class PositionalEncoding(keras.layers.Layer):
    """Sinusoidal positional encoding of "Attention Is All You Need".

    Adds to each position `pos` and dimension `j` of the input

        PE(pos, 2i)   = sin(pos / max_wavelength^(2i / hidden_dim))
        PE(pos, 2i+1) = cos(pos / max_wavelength^(2i / hidden_dim))

    (`hidden_dim` is the paper's d_model, the last dimension of the input.)

    sine in the even dimensions and cosine in the odd ones, interleaved. With
    `interleave=False` the same sines fill the first half of the dimensions
    and the cosines the second, [sin | cos], as tensor2tensor and Marian
    (HuggingFace's `MarianSinusoidalPositionalEmbedding`) lay them out:

        PE(pos, i) = sin(pos / max_wavelength^(2i / hidden_dim)),  i < h
        PE(pos, h + i) = cos(pos / max_wavelength^(2i / hidden_dim))

    with h = ceil(hidden_dim / 2). It has no weights and works at any
    sequence length. The Keras mask of the input passes through.

    Args:
        max_wavelength: the base of the geometric progression of wavelengths,
            10000 in the paper.
        interleave: sine and cosine in alternate dimensions (True, the
            paper) or in two halves (False).

    Call arguments:
        inputs: a float tensor of shape (batch, seq, hidden_dim).
        start_index: the position of the first token, an int, a scalar
            tensor or a (batch,) vector (one per row); during cached
            decoding, the index of the token fed in.

    Returns:
        `inputs + PE`, same shape and dtype as `inputs`.

    Example:
    >>> x = np.zeros((2, 5, 8), "float32")
    >>> y = keras_tfm.layers.PositionalEncoding()(x)
    >>> y.shape
    TensorShape([2, 5, 8])

    Reference: Vaswani et al., 2017, section 3.5.
    """

    def __init__(self, max_wavelength=10000, interleave=True, **kwargs):
        super().__init__(**kwargs)
        self.max_wavelength = check_positive_float("max_wavelength", max_wavelength)
        if not isinstance(interleave, bool):
            raise ValueError(
                "`interleave` must be True or False. Received: "
                f"interleave={interleave!r}"
            )
        self.interleave = interleave
        self.supports_masking = True

    def call(self, inputs, start_index=0):
        check_rank("inputs", inputs, 3, "(batch, seq, hidden_dim)")
        return inputs + ops.cast(self.encoding(inputs, start_index), inputs.dtype)

    def encoding(self, inputs, start_index=0):
        """The float32 encoding (seq, hidden_dim) of `inputs`' positions;
        (batch, seq, hidden_dim) with a (batch,) `start_index`."""
        hidden_dim = inputs.shape[-1]
        # Frequencies in float64 NumPy: exact to float32 rounding at any hidden_dim.
        dims = np.arange(hidden_dim)
        if self.interleave:
            pair, is_sine = (dims // 2) * 2, dims % 2 == 0
        else:
            half = (hidden_dim + 1) // 2
            pair, is_sine = 2 * np.where(dims < half, dims, dims - half), dims < half
        inverse_frequency = self.max_wavelength ** (-pair / hidden_dim)
        position = positions(start_index, ops.shape(inputs)[1])  # (S,) or (B, S)
        angles = ops.expand_dims(position, -1) * ops.convert_to_tensor(
            inverse_frequency.astype("float32")
        )
        return ops.where(is_sine, ops.sin(angles), ops.cos(angles))

    def compute_output_shape(self, input_shape):
        # `input_shape`: the name Keras records for layers without build().
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(
            {"max_wavelength": self.max_wavelength, "interleave": self.interleave}
        )
        return config

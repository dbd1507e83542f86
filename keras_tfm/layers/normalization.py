"""The one place where "layer_norm" / "rms_norm" becomes a Keras layer.

Blocks and models call `make_normalization`, so a change to how a norm is
built (epsilon, dtype, a new kind) lands once.
"""

import keras

from keras_tfm.validation import NORMALIZATIONS, check_choice


def make_normalization(normalization, epsilon, dtype=None, name=None, hidden_dim=None):
    """A `LayerNormalization` or `RMSNormalization` layer.

    Args:
        normalization: "layer_norm" or "rms_norm".
        epsilon: added to the variance (or mean square).
        dtype: the dtype policy.
        name: the layer name.
        hidden_dim: when given, the layer is built for (..., hidden_dim).

    Example:
    >>> norm = make_normalization("rms_norm", 1e-6, hidden_dim=8)
    >>> type(norm).__name__, tuple(norm.weights[0].shape)
    ('RMSNormalization', (8,))
    """
    check_choice("normalization", normalization, NORMALIZATIONS)
    cls = (
        keras.layers.RMSNormalization
        if normalization == "rms_norm"
        else keras.layers.LayerNormalization
    )
    layer = cls(epsilon=epsilon, dtype=dtype, name=name)
    if hidden_dim is not None:
        layer.build((None, None, hidden_dim))
    return layer

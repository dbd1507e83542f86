"""keras-tfm: Transformer layers, model families and a model zoo for Keras 3."""

from keras_tfm import layers

__version__ = "0.1.0"

__all__ = ["layers", "__version__"]

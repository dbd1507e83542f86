"""keras-tfm: Transformer layers, model families and a model zoo for Keras 3.

Example:
>>> import keras_tfm
>>> model = keras_tfm.zoo.from_preset("gpt_nano")
"""

import importlib

from keras_tfm import layers

__version__ = "0.1.0"

# Imported on first use: they pull in keras-hub, which `layers` does not need.
_SUBMODULES = ("convert", "data", "generation", "models", "training", "zoo")


def __getattr__(name):
    if name in _SUBMODULES:
        return importlib.import_module(f"keras_tfm.{name}")
    raise AttributeError(f"module 'keras_tfm' has no attribute {name!r}")


__all__ = ["layers", "__version__", *_SUBMODULES]

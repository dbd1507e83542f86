"""keras-tfm: Transformer layers, model families and a model zoo for Keras 3.

Importing the package registers every serializable class (layers, models,
losses, metrics, schedules), so `keras.models.load_model` reads any
keras-tfm `.keras` file after a plain `import keras_tfm`.

Example:
>>> import keras_tfm
>>> model = keras_tfm.zoo.from_preset("gpt_tiny")
"""

import importlib

from keras_tfm import data, generation, layers, models, training, zoo

__version__ = "0.1.0"

# Imported on first use: it needs safetensors, which nothing else does.
_LAZY_SUBMODULES = ("convert",)


def __getattr__(name):
    if name in _LAZY_SUBMODULES:
        return importlib.import_module(f"keras_tfm.{name}")
    raise AttributeError(f"module 'keras_tfm' has no attribute {name!r}")


__all__ = [
    "__version__",
    "convert",
    "data",
    "generation",
    "layers",
    "models",
    "training",
    "zoo",
]

"""keras-tfm: Transformer layers, model families and a model zoo for Keras 3.

Importing the package registers every serializable class (layers, models,
losses, metrics, schedules, the converted checkpoints' tokenizers), so
`keras.models.load_model` reads any keras-tfm `.keras` file after a plain
`import keras_tfm`, which imports no TensorFlow (docs/backends.md). On a
CPU with AVX-512 it also asks XLA for 512-bit vector code
(`keras_tfm.runtime.prefer_wide_vectors`), and it points TensorFlow's
persistent XLA compilation cache at keras-tfm's cache folder
(`keras_tfm.runtime.use_persistent_xla_cache`, `keras_tfm_lite.user_cache`).
TensorFlow, which Keras imports, starts quietly: `TF_CPP_MIN_LOG_LEVEL`
defaults to 2 (errors only; a value you set is kept, 0 shows everything) and
the start-up lines absl writes before any setting applies are dropped
(`keras_tfm_launcher.quiet_tensorflow_import`).

Example:
>>> import keras_tfm
>>> model = keras_tfm.zoo.from_preset("gpt_tiny")
"""

import importlib

from keras_tfm_launcher import quiet_tensorflow_import

# The subpackages whose classes `keras.saving` must know (layers, models,
# losses, metrics, schedules, samplers, tokenizers) and the zoo (which
# registers `from_preset`'s loader) are imported now; none
# of them imports TensorFlow until a TensorFlow-only feature runs
# (`keras_tfm._optional`). The others are imported on first use, as
# Hugging Face transformers' `_LazyModule` does (`keras_tfm.export`
# imports TensorFlow as it is imported).
with quiet_tensorflow_import():  # Keras imports TensorFlow here
    from keras_tfm import (
        generation,
        layers,
        models,
        runtime,
        tokenizers,
        training,
        zoo,
    )

_LAZY_SUBPACKAGES = (
    "baselines",
    "chat",
    "convert",
    "data",
    "datasets",
    "distribute",
    "export",
    "serving",
)


def __getattr__(name):
    if name in _LAZY_SUBPACKAGES:
        module = importlib.import_module(f"keras_tfm.{name}")
        globals()[name] = module
        return module
    raise AttributeError(f"module 'keras_tfm' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY_SUBPACKAGES))


runtime.prefer_wide_vectors()
runtime.use_persistent_xla_cache()

__version__ = "0.1.0"

__all__ = [
    "__version__",
    "baselines",
    "chat",
    "convert",
    "data",
    "datasets",
    "export",
    "generation",
    "layers",
    "models",
    "runtime",
    "tokenizers",
    "training",
    "zoo",
]

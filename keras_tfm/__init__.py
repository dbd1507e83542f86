"""keras-tfm: Transformer layers, model families and a model zoo for Keras 3.

Importing the package registers every serializable class (layers, models,
losses, metrics, schedules, the converted checkpoints' tokenizers), so
`keras.models.load_model` reads any keras-tfm `.keras` file after a plain
`import keras_tfm`. On a CPU with AVX-512 it also asks XLA for 512-bit
vector code (`keras_tfm.runtime.prefer_wide_vectors`), and it points
TensorFlow's persistent XLA compilation cache at keras-tfm's cache folder
(`keras_tfm.runtime.use_persistent_xla_cache`, `keras_tfm_lite.user_cache`).

Example:
>>> import keras_tfm
>>> model = keras_tfm.zoo.from_preset("gpt_tiny")
"""

from keras_tfm import (
    baselines,
    convert,
    data,
    datasets,
    export,
    generation,
    layers,
    models,
    runtime,
    tokenizers,
    training,
    zoo,
)

runtime.prefer_wide_vectors()
runtime.use_persistent_xla_cache()

__version__ = "0.1.0"

__all__ = [
    "__version__",
    "baselines",
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

"""keras-tfm: Transformer layers, model families and a model zoo for Keras 3.

`import keras_tfm` imports neither Keras nor TensorFlow: each subpackage is
imported when first used (`keras_tfm.models`, `from keras_tfm import zoo`),
as Hugging Face transformers' `_LazyModule` does, so that what runs without
them (`keras_tfm.lite`: the cache folder and a cached LiteRT chat, and the
`keras-tfm` command's start, `keras_tfm.launcher`) never pays for them.
Every serializable class (layers, models, losses, metrics, schedules, the
converted checkpoints' tokenizers) is still registered with `keras.saving`
once Keras is imported too, before or after keras_tfm
(`keras_tfm._registration`), so `keras.models.load_model` reads any
keras-tfm `.keras` file after `import keras_tfm`. Keras's TensorFlow
then starts quietly: `TF_CPP_MIN_LOG_LEVEL` defaults to 2 (errors only; a
value you set is kept, 0 shows everything) and the start-up lines absl
writes before any setting applies are dropped
(`keras_tfm._tensorflow_logs`).

On a CPU with AVX-512 the import also asks XLA for 512-bit vector code
(`keras_tfm.runtime.prefer_wide_vectors`). TensorFlow's persistent XLA
compilation cache is pointed at keras-tfm's cache folder, its files checked
first, when Keras is imported too, or at once where TensorFlow already is
(`keras_tfm.runtime.use_persistent_xla_cache`, `keras_tfm.lite.user_cache`):
what imports neither, such as the LiteRT chat, never reads that folder. Both
are environment variables that XLA reads at its first compilation.

Example:
>>> import keras_tfm
>>> model = keras_tfm.zoo.from_preset("gpt_tiny")
"""

import importlib
import sys

from keras_tfm import runtime
from keras_tfm._registration import register_with_keras

# Every public submodule, imported on first use (`keras_tfm.export` imports
# TensorFlow as it is imported; the others only when a TensorFlow-only
# feature runs, `keras_tfm._optional`). Listed rather than found:
# `pkgutil.iter_modules` costs the LiteRT chat's start 15 ms (it imports
# `inspect`); tests/test_lazy_import.py checks the list against the folder.
_SUBMODULES = frozenset(
    {
        "baselines",
        "chat",
        "cli",
        "convert",
        "data",
        "datasets",
        "distribute",
        "export",
        "generation",
        "kernels",
        "launcher",
        "layers",
        "legacy_files",
        "lite",
        "models",
        "progress",
        "quantized_weights",
        "runtime",
        "saving",
        "serving",
        "tokenizers",
        "training",
        "validation",
        "zoo",
    }
)


def __getattr__(name):
    if name in _SUBMODULES:
        return importlib.import_module(f"keras_tfm.{name}")
    raise AttributeError(f"module 'keras_tfm' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | _SUBMODULES)


runtime.prefer_wide_vectors()
if "tensorflow" in sys.modules:  # else once Keras is imported (_registration)
    runtime.use_persistent_xla_cache()
register_with_keras()

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
    "lite",
    "models",
    "runtime",
    "tokenizers",
    "training",
    "zoo",
]

"""TensorFlow, imported when first used: keras-tfm imports without it.

The model stack (layers, kernels, backbones, tasks' forward pass and `fit`)
is `keras.ops` and runs on every Keras backend; string preprocessing
(`tf.data`, TensorFlow Text), SavedModel and LiteRT export, the tiled
attention kernel's loops and `tf.distribute` run on TensorFlow. Modules that
use TensorFlow inside their functions import it as
`from keras_tfm._optional import tensorflow as tf`: the module is imported
on the first attribute read, and where it is not installed that read raises
an `ImportError` naming what to install. Packages that need TensorFlow as
soon as they are imported (`keras_tfm.export`, `keras_tfm.data`) call
`require_tensorflow` first.

Example:
>>> from keras_tfm._optional import tensorflow as tf
>>> int(tf.constant(2) + 1)  # imports TensorFlow here
3
"""

import importlib
import importlib.util
import sys

from keras_tfm._tensorflow_logs import quiet_tensorflow_import

INSTALL = "pip install tensorflow tensorflow-text"


def require_tensorflow(feature, module="tensorflow"):
    """Imports `module`, or raises an ImportError naming `feature` and the fix.

    Args:
        feature: what needs TensorFlow, as the message should name it.
        module: "tensorflow" or "tensorflow_text".

    Returns:
        The module.
    """
    try:
        with quiet_tensorflow_import():
            return importlib.import_module(module)
    except ImportError as error:
        raise ImportError(
            f"{feature} runs on TensorFlow, which cannot be imported here "
            f"({error}). keras-tfm's layers and models run on any Keras "
            f"backend without it; for this feature install it: `{INSTALL}` "
            "(keras-tfm's default install includes both)."
        ) from error


def tensorflow_installed():
    """Whether TensorFlow can be found (imports nothing)."""
    try:
        return importlib.util.find_spec("tensorflow") is not None
    except ImportError:  # a finder that refuses it
        return False


def tensorflow_loaded():
    """Whether TensorFlow has been imported in this process (imports nothing)."""
    return "tensorflow" in sys.modules


def is_dataset(x):
    """Whether `x` is a `tf.data.Dataset`, without importing TensorFlow.

    Nothing is a dataset while TensorFlow is not imported.
    """
    return tensorflow_loaded() and isinstance(x, sys.modules["tensorflow"].data.Dataset)


def is_tf_tensor(x):
    """Whether `x` is a `tf.Tensor` or `tf.RaggedTensor`, importing nothing."""
    return tensorflow_loaded() and isinstance(
        x, sys.modules["tensorflow"].Tensor | sys.modules["tensorflow"].RaggedTensor
    )


def python_ids(ids):
    """`ids` (a ragged or dense tensor of any backend, a NumPy array, or
    Python ids) as Python ints and lists, importing nothing.

    Example:
    >>> import numpy as np
    >>> python_ids(np.array([[1, 2], [3, 4]], "int32"))
    [[1, 2], [3, 4]]
    """
    if hasattr(ids, "to_list"):  # a tf.RaggedTensor
        return ids.to_list()
    if hasattr(ids, "numpy"):
        ids = ids.numpy()
    if hasattr(ids, "tolist"):  # a NumPy array (or a JAX array's copy)
        return ids.tolist()
    return ids


def use_tf_graph(inputs=None):
    """Whether text preprocessing takes its TensorFlow path for `inputs`.

    keras-hub's rule (`PreprocessingLayer._use_tf_workflow`): TensorFlow ops
    while a `tf.function` or `tf.data` graph is traced, the Python path
    (HF `tokenizers`, SentencePiece, NumPy) otherwise, on every backend;
    keras-tfm also keeps TensorFlow tensors given eagerly on TensorFlow.
    Without TensorFlow imported it is always False.
    """
    if not tensorflow_loaded():
        return False
    return not sys.modules["tensorflow"].executing_eagerly() or is_tf_tensor(inputs)


class _LazyModule:
    """A module imported on its first attribute read.

    Hand-written rather than Keras's `LazyModule`, which
    is private to Keras and whose message names no keras-tfm feature.
    """

    def __init__(self, name, feature):
        self._name = name
        self._feature = feature
        self._module = None

    def __getattr__(self, attribute):
        if self._module is None:
            self._module = require_tensorflow(self._feature, self._name)
        return getattr(self._module, attribute)

    def __repr__(self):
        return f"<lazily imported module {self._name!r}>"


tensorflow = _LazyModule("tensorflow", "This keras-tfm feature")
tensorflow_text = _LazyModule(
    "tensorflow_text", "This keras-tfm tokenizer's TensorFlow Text graph"
)

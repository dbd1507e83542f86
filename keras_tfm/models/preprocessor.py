"""The base of every preprocessor: the one place a task sees strings.

A preprocessor is a Keras layer that owns a tokenizer and the packing of
its ids for one task. Called on `(x, y, sample_weight)` it returns what the
task's `fit` reads, as tensors of the Keras backend. As keras-hub's
preprocessing layers, it has two paths that give the same ids: TensorFlow
ops while a `tf.data` or `tf.function` graph is traced
(`dataset.map(preprocessor)`), and Python (the tokenizers' HF `tokenizers`,
SentencePiece or Python code, NumPy packing) in eager calls, which need no
TensorFlow (`keras_tfm._optional.use_tf_graph` decides). Its host-side
helpers turn a Python string (or list of them) into id lists for
generation and classification, and ids back into text.

Written here rather than subclassing keras-hub's `Preprocessor` because
keras-hub stores the tokenizer outside Keras' attribute tracking (its
presets save it separately): here the tokenizer is a tracked sublayer, so a
`.keras` file carries its vocabulary as assets.
"""

import keras
import numpy as np

from keras_tfm._optional import tensorflow as tf
from keras_tfm._optional import use_tf_graph
from keras_tfm.generation.outputs import format_outputs
from keras_tfm.models.tokenizer_attachment import (
    is_text,
    restore_tokenizer,
    serialize_tokenizer,
    tokenizer_end_id,
    tokenizer_start_id,
)
from keras_tfm.validation import check_positive_int


class PackedLength:
    """A preprocessor's length argument, settable after construction: setting
    it checks the value and re-sizes the packer that reads it (the packer's
    length is the value plus `extra`), so that `preprocessor.sequence_length
    = 64` is what the next batch is packed to.

    Example:
    >>> import keras_hub
    >>> tokenizer = keras_hub.tokenizers.ByteTokenizer()
    >>> preprocessor = keras_tfm.models.CausalLMPreprocessor(
    ...     tokenizer, 8192, padding="max_length")
    >>> preprocessor.sequence_length = 4
    >>> preprocessor(["abcdefgh"])[0].shape
    TensorShape([1, 4])
    """

    def __init__(self, packer, extra=0, minimum=1, why=""):
        self.packer, self.extra, self.minimum, self.why = packer, extra, minimum, why

    def __set_name__(self, owner, name):
        self.name = name

    def __get__(self, preprocessor, owner=None):
        if preprocessor is None:
            return self
        return object.__getattribute__(preprocessor, f"_{self.name}")

    def __set__(self, preprocessor, value):
        check_positive_int(self.name, value)
        if value < self.minimum:
            raise ValueError(
                f"`{self.name}` must be at least {self.minimum}{self.why}. "
                f"Received: {self.name}={value}"
            )
        object.__setattr__(preprocessor, f"_{self.name}", value)  # untracked
        packer = getattr(preprocessor, self.packer, None)
        if packer is not None:  # else made later, from the value set here
            packer.sequence_length = value + self.extra


class Preprocessor(keras.layers.Layer):
    """A tokenizer and how a task packs its ids.

    Args:
        tokenizer: a keras-hub tokenizer layer (or its serialized dict).
    """

    def __init__(self, tokenizer, **kwargs):
        kwargs.setdefault("dtype", "int32")
        super().__init__(**kwargs)
        # Strings and Python lists are valid positional inputs, kept as they
        # are (keras-hub's preprocessing layers do the same).
        self._convert_input_args = False
        self._allow_non_tensor_positional_args = True
        tokenizer = restore_tokenizer(tokenizer)
        if not isinstance(tokenizer, keras.layers.Layer):
            raise ValueError(
                f"`tokenizer` must be a keras-hub tokenizer layer. Received: "
                f"tokenizer={tokenizer!r}"
            )
        self.tokenizer = tokenizer
        self.built = True

    def __call__(self, x, y=None, sample_weight=None, **kwargs):
        if use_tf_graph(x):
            # The TensorFlow path reads tensors: Python strings and lists
            # become TensorFlow tensors first.
            x, y, sample_weight = (_as_tensors(v) for v in (x, y, sample_weight))
        return super().__call__(x, y=y, sample_weight=sample_weight, **kwargs)

    @property
    def end_token_id(self):
        """The tokenizer's end-of-sequence id ("[END]", "</s>", ...), or None."""
        return tokenizer_end_id(self.tokenizer)

    @property
    def start_token_id(self):
        """The tokenizer's start-of-sequence id ("[START]", "<s>", ...), or None."""
        return tokenizer_start_id(self.tokenizer)

    def token_lists(self, texts):
        """The token ids of each text, as a list of 1-D int64 arrays."""
        ids = self.tokenizer(list(texts))
        ids = ids.to_list() if hasattr(ids, "to_list") else ids
        if not isinstance(ids, list):
            ids = keras.ops.convert_to_numpy(ids).tolist()
        return [np.asarray(row, "int64").reshape(-1) for row in ids]

    def generate_preprocess(self, texts):
        """The token ids of each prompt or source: a list of 1-D int arrays."""
        return self.token_lists(texts)

    def generate_postprocess(self, rows, kind, stop_token_ids):
        """Id rows back to clean text (stop ids dropped), shaped by `kind`."""
        return format_outputs(rows, kind, self.tokenizer, stop_token_ids)

    def get_config(self):
        config = super().get_config()
        config["tokenizer"] = serialize_tokenizer(self.tokenizer)
        return config


def as_backend_tensors(*values):
    """NumPy arrays (or None) as tensors of the Keras backend: the Python
    path's outputs, as keras-hub's preprocessing layers return them."""
    return tuple(None if v is None else keras.ops.convert_to_tensor(v) for v in values)


def _as_tensors(value):
    if value is None or isinstance(value, dict):
        return value if value is None else {k: _as_tensors(v) for k, v in value.items()}
    if isinstance(value, (str, bytes, list, tuple, np.ndarray)):
        return tf.convert_to_tensor(value)
    return value


__all__ = ["Preprocessor", "as_backend_tensors", "is_text"]

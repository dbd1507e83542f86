"""Strings in a task's `fit`, `evaluate` and `predict` without `tf.data`.

On the TensorFlow backend `Task` reads a list of strings through a
`tf.data` pipeline; on JAX and PyTorch, where TensorFlow may be absent, it
reads them through `TextBatches`, a `keras.utils.PyDataset` whose batches
are the preprocessor's Python path (HF `tokenizers`, SentencePiece, NumPy
packing) on a slice of the strings. keras-hub 0.27+ does the same with
Grain; Keras's own `PyDataset` does it here without another dependency.
"""

import math
import random

import keras
import numpy as np

from keras_tfm.models.class_labels import check_class_labels
from keras_tfm.models.tokenizer_attachment import is_text


def _rows(name, value):
    """`value` (strings, labels or weights) as something indexable by row."""
    if value is None:
        return None
    if isinstance(value, str | bytes):
        value = [value]
    if is_text(value) or isinstance(value, list | tuple):
        return np.asarray(list(value), dtype=object)
    array = np.asarray(keras.ops.convert_to_numpy(value))
    if array.ndim == 0:
        raise ValueError(
            f"`{name}` must have one entry per text. Received: {name}={array!r}"
        )
    return array


def _take(rows, index):
    """Rows `index` of `rows`: a list of Python strings, or an array slice."""
    if rows is None:
        return None
    taken = rows[index]
    if taken.dtype == object and is_text(taken):
        return [t.decode("utf-8") if isinstance(t, bytes) else t for t in taken]
    return taken


def _numpy(value):
    return None if value is None else np.asarray(keras.ops.convert_to_numpy(value))


class TextBatches(keras.utils.PyDataset):
    """Batches of strings (with labels, weights) run through a preprocessor.

    Args:
        preprocessor: the task's `Preprocessor`.
        x: a list (or array) of strings.
        y: optional labels (an array), or the target strings of a
            `Seq2SeqLM`.
        sample_weight: optional weights, one per text.
        batch_size: texts per batch (default 32).
        shuffle: draw a new order of the texts at every epoch (Python's
            `random`, as Keras's `PyDataset` shuffles its batches, which
            `keras.utils.set_random_seed` seeds).
        label_limit: the exclusive upper bound of the preprocessed labels
            (`Task.label_range`), checked in every batch; None: unchecked.
        label_kind: "class" or "token", as the error names the ids.
        label_name: the argument the error names ("y", ...).

    Returns (per batch): `(x,)`, `(x, y)` or `(x, y, sample_weight)` as
    NumPy arrays (dicts of them for a dict `x`), what Keras feeds any
    backend.

    Example:
    >>> import keras_hub
    >>> tokenizer = keras_hub.tokenizers.ByteTokenizer()
    >>> preprocessor = keras_tfm.models.CausalLMPreprocessor(tokenizer, 4)
    >>> x, y, w = TextBatches(preprocessor, ["abc", "de"], batch_size=2)[0]
    >>> x.tolist()  # padded to the batch's longest row (`padding`)
    [[97, 98], [100, 101]]
    """

    def __init__(
        self,
        preprocessor,
        x,
        y=None,
        sample_weight=None,
        batch_size=None,
        shuffle=False,
        label_limit=None,
        label_kind="class",
        label_name="y",
    ):
        super().__init__()
        self.preprocessor = preprocessor
        self.x = _rows("x", x)
        self.y = _rows("y", y)
        self.sample_weight = _rows("sample_weight", sample_weight)
        for name, rows in (("y", self.y), ("sample_weight", self.sample_weight)):
            if rows is not None and len(rows) != len(self.x):
                raise ValueError(
                    f"`x` and `{name}` must have one entry per text. Received: "
                    f"{len(self.x)} texts and {name} of length {len(rows)}"
                )
        self.batch_size = batch_size or 32
        self.shuffle = bool(shuffle)
        self.label_limit = label_limit
        self.label_kind = label_kind
        self.label_name = label_name
        self.order = np.arange(len(self.x))
        self.on_epoch_begin()

    def on_epoch_begin(self):
        if self.shuffle:
            self.order = np.array(random.sample(range(len(self.x)), len(self.x)))

    @property
    def num_batches(self):
        return math.ceil(len(self.x) / self.batch_size)

    def __len__(self):
        return self.num_batches

    def as_tf_dataset(self):
        """The batches as a `tf.data.Dataset` of any length per batch, in a
        new order at each epoch (each pass over the dataset).

        Keras reads a `PyDataset` on TensorFlow through a signature fixed by
        its first two batches, which refuses a later batch of another
        length; this one leaves every axis free.
        """
        from keras_tfm._optional import tensorflow as tf

        def spec(value):
            value = np.asarray(value)
            return tf.TensorSpec([None] * value.ndim, tf.as_dtype(value.dtype))

        def epoch():
            self.on_epoch_begin()
            for index in range(self.num_batches):
                yield self[index]

        signature = keras.tree.map_structure(spec, self[0])
        dataset = tf.data.Dataset.from_generator(epoch, output_signature=signature)
        # Its length known, Keras neither guesses the steps nor warns.
        return dataset.apply(tf.data.experimental.assert_cardinality(self.num_batches))

    def __getitem__(self, index):
        if not 0 <= index < self.num_batches:
            raise IndexError(
                f"Batch {index} of {self.num_batches}. Received: index={index}"
            )
        rows = self.order[index * self.batch_size : (index + 1) * self.batch_size]
        parts = (_take(v, rows) for v in (self.x, self.y, self.sample_weight))
        out = self.preprocessor(*parts)
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(out)
        x = keras.tree.map_structure(_numpy, x)
        y, sample_weight = _numpy(y), _numpy(sample_weight)
        if self.label_limit is not None and y is not None:
            check_class_labels(y, self.label_limit, self.label_name, self.label_kind)
        return tuple(v for v in (x, y, sample_weight) if v is not None)

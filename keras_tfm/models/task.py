"""The base of every task: a backbone, a head and an optional preprocessor.

A task (`CausalLM`, `Seq2SeqLM`, `EncoderClassifier`, `SentenceEncoder`,
`MaskedLanguageModel`) holds a backbone (the family's layers), the layers of
its own head, and a `Preprocessor` that owns the tokenizer. The task's
`call` takes token ids only; strings go through the preprocessor.

`fit`, `evaluate` and `predict` are written once, here, as keras-hub's
`PipelineModel` does: strings go through the preprocessor inside a
`tf.data` pipeline on the TensorFlow backend (so they train in one line,
and under XLA), and through its Python path in a `keras.utils.PyDataset`
(`TextBatches`) on JAX and PyTorch, which need no TensorFlow. Label ids are
checked against the head's range (eagerly for arrays, in the pipeline for
datasets and for strings' batches) so that a bad label is a `ValueError`
naming it, not a NaN loss or a graph error. The task classes themselves
override none of these.
"""

import contextlib

import keras
import numpy as np

from keras_tfm._optional import is_dataset
from keras_tfm._optional import tensorflow as tf
from keras_tfm.kernels.attention import CHUNKED_ATTENTION_MIN_LENGTH
from keras_tfm.kernels.chunked_feed_forward import CHUNKED_FEED_FORWARD_MIN_LENGTH
from keras_tfm.kernels.plain_scope import plain_kernels
from keras_tfm.models.chat_examples import as_chat_examples, is_chat_examples
from keras_tfm.models.class_labels import (
    check_class_labels,
    label_errors,
    with_checked_labels,
)
from keras_tfm.models.legacy_configs import preprocessor_from_legacy_config
from keras_tfm.models.preprocessor import Preprocessor
from keras_tfm.models.preset_loading import PresetMixin
from keras_tfm.models.text_batches import TextBatches
from keras_tfm.models.tokenizer_attachment import is_text

# The answering methods of the tasks and the tasks that have them, for the
# error of a task asked for another's (a classifier's `.generate`).
ANSWERING_METHODS = {
    "generate": "CausalLM, Seq2SeqLM",
    "chat": "CausalLM (an instruct preset)",
    "classify": "EncoderClassifier",
    "encode": "SentenceEncoder",
    "fill_mask": "MaskedLanguageModel",
}


def restore_preprocessor(preprocessor):
    """`None`, a `Preprocessor`, or its serialized dict."""
    if isinstance(preprocessor, dict):
        preprocessor = keras.saving.deserialize_keras_object(preprocessor)
    if preprocessor is not None and not isinstance(preprocessor, Preprocessor):
        raise ValueError(
            "`preprocessor` must be None or a keras_tfm Preprocessor. Received: "
            f"preprocessor={preprocessor!r}"
        )
    return preprocessor


def _holds_text(dataset):
    """Whether a dataset's inputs are strings (a dataset of ids is ready)."""
    spec = dataset.element_spec
    spec = spec[0] if isinstance(spec, tuple) else spec
    return getattr(spec, "dtype", None) == tf.string


# Rows shorter than this never take the tiled attention or the chunked
# feed-forward network.
TILED_MIN_LENGTH = min(CHUNKED_ATTENTION_MIN_LENGTH, CHUNKED_FEED_FORWARD_MIN_LENGTH)
PREPROCESSED_LENGTHS = (
    "sequence_length",
    "encoder_sequence_length",
    "decoder_sequence_length",
)


def check_backbone(backbone, backbone_class):
    """`backbone` if it is a `backbone_class`, else a ValueError that says so.

    Example:
    >>> from keras_tfm.models import DecoderBackbone, EncoderBackbone
    >>> check_backbone("bert", EncoderBackbone)
    Traceback (most recent call last):
    ...
    ValueError: `backbone` must be an EncoderBackbone. Received: backbone='bert'
    """
    if not isinstance(backbone, backbone_class):
        name = backbone_class.__name__
        article = "an" if name[0] in "AEIOU" else "a"
        raise ValueError(
            f"`backbone` must be {article} {name}. Received: backbone={backbone!r}"
        )
    return backbone


def deserialize_parts(config, preprocessor_class, sequence_length=None):
    """A task's `config` with its backbone deserialized and a preprocessor.

    Files saved before issue 36 hold a `tokenizer` and no preprocessor: one
    of `preprocessor_class` is built around it, for `sequence_length`
    tokens (by default the backbone's `max_sequence_length`).
    """
    config = dict(config)
    backbone = keras.saving.deserialize_keras_object(config["backbone"])
    config["backbone"] = backbone
    preprocessor_from_legacy_config(
        config, preprocessor_class, sequence_length or backbone.max_sequence_length
    )
    return config


class Task(PresetMixin, keras.Model):
    """Base of the tasks: `preprocessor`, `from_preset` and the data pipeline.

    Subclasses set `self.backbone` and `self.preprocessor` and say which
    labels they read by `label_range` ("class" ids below `num_classes`,
    "token" ids below the vocabulary size, or None).
    """

    # "class" or "token": how a label error names the ids `label_range` bounds.
    label_kind = None

    def __getattr__(self, name):
        # Only for names that normal lookup did not find: Keras' own
        # attributes are untouched, and `hasattr` still answers False.
        parent = getattr(super(), "__getattr__", None)
        if parent is not None:  # PyTorch: torch.nn.Module keeps sublayers in _modules
            try:
                return parent(name)
            except AttributeError:
                pass
        message = f"{type(self).__name__!r} object has no attribute {name!r}"
        if name in ANSWERING_METHODS:
            own = [
                f"`{method}`"
                for method in ANSWERING_METHODS
                if callable(getattr(type(self), method, None))
            ]
            message += (
                f": `{name}` is a method of {ANSWERING_METHODS[name]}; this "
                f"{type(self).__name__} answers with {', '.join(own) or 'its call'}."
                " `keras-tfm presets` lists each preset's task."
            )
        raise AttributeError(message)

    @property
    def tokenizer(self):
        """The preprocessor's tokenizer, or None without a preprocessor."""
        preprocessor = getattr(self, "preprocessor", None)
        return None if preprocessor is None else preprocessor.tokenizer

    def get_config(self):
        """The Keras arguments and the two parts; a task adds its own."""
        config = super().get_config()
        config["backbone"] = keras.saving.serialize_keras_object(self.backbone)
        config["preprocessor"] = keras.saving.serialize_keras_object(self.preprocessor)
        return config

    def label_range(self):
        """The exclusive upper bound of label ids, or None to check nothing."""
        return None

    def _pipeline(self, x, y, sample_weight, batch_size, name="y", shuffle=False):
        """The data as `fit` reads it: preprocessed, labels checked."""
        limit, kind = self.label_range(), self.label_kind or "class"
        if is_dataset(x):
            if self.preprocessor is not None and _holds_text(x):
                x = x.map(self.preprocessor, num_parallel_calls=tf.data.AUTOTUNE)
            if limit is not None:
                x = with_checked_labels(x, limit, name)
            return x, y, sample_weight
        if is_chat_examples(x):
            if not callable(getattr(self.preprocessor, "_pack_chats", None)):
                raise ValueError(
                    f"`x` holds chat examples, which a CausalLM with a "
                    f"preprocessor trains on; this {type(self).__name__} "
                    f"reads {'token ids' if self.preprocessor is None else 'strings'}. "
                    f"Received: x={str(x)[:80]}"
                )
            if y is not None:
                raise ValueError(
                    "Chat examples hold their answers, so `y` must be None. "
                    f"Received: y={str(y)[:80]}"
                )
            batches = TextBatches(
                self.preprocessor, as_chat_examples(x), None, sample_weight,
                batch_size, shuffle,
            )  # fmt: skip
            if keras.backend.backend() == "tensorflow":
                return batches.as_tf_dataset(), None, None
            return batches, None, None
        if is_text(x):
            if self.preprocessor is None:
                raise ValueError(
                    f"`x` holds strings but this {type(self).__name__} has no "
                    "preprocessor to read them: pass token ids, or build it "
                    "with `preprocessor=`. Received: x="
                    f"{str(x)[:80]}"
                )
            if keras.backend.backend() != "tensorflow":
                if limit is not None:
                    check_class_labels(y, limit, name, kind)
                batches = TextBatches(
                    self.preprocessor, x, y, sample_weight, batch_size, shuffle,
                    limit, kind, name,
                )  # fmt: skip
                return batches, None, None
            x = np.asarray(x if not isinstance(x, str) else [x], dtype=object)
            parts = tuple(p for p in (x, y, sample_weight) if p is not None)
            dataset = tf.data.Dataset.from_tensor_slices(
                parts if len(parts) > 1 else parts[0]
            )
            if shuffle:  # what `fit` does with arrays, at every epoch
                dataset = dataset.shuffle(len(x), reshuffle_each_iteration=True)
            dataset = dataset.batch(batch_size or 32)
            dataset = dataset.map(self.preprocessor)
            if limit is not None:
                dataset = with_checked_labels(dataset, limit, name)
            return dataset, None, None
        if limit is not None:
            check_class_labels(y, limit, name, kind)
        return x, y, sample_weight

    def fit(self, x=None, y=None, batch_size=None, sample_weight=None, **kwargs):
        """Keras' `fit`, with strings read by the preprocessor and labels checked.

        Takes what `keras.Model.fit` takes; `x` may also be a list of
        strings (with `y` the labels), read by the preprocessor in a
        `tf.data` pipeline on TensorFlow and in Python batches
        (`TextBatches`) on the other backends, or a `tf.data.Dataset` of
        strings, which the preprocessor maps inside the pipeline. A
        `CausalLM` also takes a list of chat examples (`{"messages": [...]}`
        dicts or `(prompt, answer)` pairs) and learns their answers only
        (`keras_tfm.models.chat_examples`).
        """
        shuffle = kwargs.pop("shuffle", True)
        kernels = self._kernels_for(x)
        x, y, sample_weight = self._pipeline(
            x, y, sample_weight, batch_size, shuffle=shuffle
        )
        if is_dataset(x) or isinstance(x, TextBatches):
            # Keras ignores `shuffle` for a dataset (and warns); arrays of
            # strings were shuffled in the pipeline.
            batch_size, shuffle = None, False
        kwargs["shuffle"] = shuffle
        validation = kwargs.get("validation_data")
        if validation is not None:
            if isinstance(validation, tuple):
                padded = (*validation, None, None)[:3]  # (x, y, sample_weight)
                validation = self._pipeline(*padded, None, "validation_data labels")
                validation = tuple(v for v in validation if v is not None)
                if len(validation) == 1:
                    validation = validation[0]
            else:
                validation = self._pipeline(
                    validation, None, None, None, "validation_data labels"
                )[0]
            kwargs["validation_data"] = validation
        with self._label_errors(), self._fitting(), kernels:
            return super().fit(
                x, y, batch_size=batch_size, sample_weight=sample_weight, **kwargs
            )

    def _fitting(self):
        """A context around Keras' `fit`, for a task's training-only settings."""
        return contextlib.nullcontext()

    def _kernels_for(self, x):
        """`plain_kernels()` where the preprocessor reads `x` (strings, chat
        examples, a dataset of strings) into rows that its lengths
        (`PREPROCESSED_LENGTHS`) keep below `TILED_MIN_LENGTH`; else no
        scope.

        Batches of strings have their own lengths, unknown when TensorFlow
        traces the step: attention and the feed-forward network would trace
        both their plain and their tiled computations behind a run-time
        choice (more memory and tracing time) for rows that never reach the
        tiled one.
        """
        if self.preprocessor is None or not (
            is_text(x) or is_chat_examples(x) or (is_dataset(x) and _holds_text(x))
        ):
            return contextlib.nullcontext()
        lengths = [
            getattr(self.preprocessor, name, None) for name in PREPROCESSED_LENGTHS
        ]
        lengths = [length for length in lengths if isinstance(length, int)]
        if lengths and max(lengths) < TILED_MIN_LENGTH:
            return plain_kernels()
        return contextlib.nullcontext()

    def evaluate(self, x=None, y=None, batch_size=None, sample_weight=None, **kwargs):
        """Keras' `evaluate`, with the data pipeline of `fit`."""
        kernels = self._kernels_for(x)
        x, y, sample_weight = self._pipeline(x, y, sample_weight, batch_size)
        if is_dataset(x) or isinstance(x, TextBatches):
            batch_size = None
        with self._label_errors(), kernels:
            return super().evaluate(
                x, y, batch_size=batch_size, sample_weight=sample_weight, **kwargs
            )

    def predict(self, x, batch_size=None, **kwargs):
        """Keras' `predict`; strings go through the preprocessor first."""
        kernels = self._kernels_for(x)
        if is_text(x) or is_dataset(x):
            x = self._pipeline(x, None, None, batch_size)[0]
            batch_size = None
        with kernels:
            return super().predict(x, batch_size=batch_size, **kwargs)

    def _label_errors(self):
        limit = self.label_range()
        return label_errors(limit or 0, self.label_kind or "class")

import keras
import keras_hub
import numpy as np

from keras_tfm._keras_compat import MASK_GENERATOR_TF_ONLY
from keras_tfm._optional import tensorflow as tf
from keras_tfm._optional import use_tf_graph
from keras_tfm.validation import check_positive_int, check_token_id


def _check_fraction(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"`{name}` must be a number. Received: {name}={value!r}")
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"`{name}` must be in [0, 1]. Received: {name}={value!r}")
    return float(value)


def _check_ids(rank, shape, is_integer, dtype_name):
    """The checks of both paths, on what each reads of its tensor."""
    if rank not in (1, 2):
        raise ValueError(
            "`token_ids` must have rank 2, (batch, seq), or rank 1, (seq,). "
            f"Received: token_ids.shape={tuple(shape)}"
        )
    if not is_integer:
        raise ValueError(
            f"`token_ids` must hold integer ids. Received: token_ids.dtype={dtype_name}"
        )


@keras.saving.register_keras_serializable(package="keras_tfm")
class MaskedLMMasker:
    """Turns token ids into `(x, y, sample_weight)` for `MaskedLanguageModel`.

    BERT's recipe, by `keras_hub.layers.MaskedLMMaskGenerator`: each token
    that is neither padding nor in `unselectable_token_ids` is selected with
    probability `mask_selection_rate` (at most `mask_selection_length` per
    sequence); a selected token becomes `mask_token_id` with probability
    `mask_token_rate`, a uniformly random id with probability
    `random_token_rate`, and stays unchanged otherwise. It draws a new mask
    at every call (dynamic masking, as RoBERTa). Two paths, as keras-hub's
    generator has: TensorFlow Text ops inside `tf.data.Dataset.map` and
    eagerly on the TensorFlow backend (each row gets exactly
    ceil(rate x eligible) selections); Python on the other backends, which
    need no TensorFlow (each eligible token is selected with probability
    `mask_selection_rate`, from Python's `random`, which
    `keras.utils.set_random_seed` seeds).

    In `model.fit`, map it over a repeated dataset and pass
    `steps_per_epoch` (see the example): Keras re-iterates a finite dataset
    at every epoch, and under a fixed global seed
    (`keras.utils.set_random_seed`) each new iteration replays the same
    random draws, so every epoch would see the same masks. One endless
    iteration draws new masks at every pass over the data.

    The padding mask is computed from the ids *before* masking, so a random
    replacement that happens to equal `padding_id` is still attended to.

    Args:
        vocabulary_size: number of token ids (random replacements are drawn
            from [0, vocabulary_size)).
        mask_token_id: the id of "[MASK]".
        mask_selection_length: number of prediction slots per sequence; fewer
            selections are padded with weight 0, more are truncated.
        mask_selection_rate: probability that an eligible token is selected.
        unselectable_token_ids: ids never selected (e.g. [CLS], [SEP]); the
            padding id is always added.
        padding_id: the id of padding tokens.
        mask_token_rate: share of selections replaced by `mask_token_id`.
        random_token_rate: share of selections replaced by a random id.

    Call arguments:
        inputs: int token ids (batch, seq) or (seq,), or a dict with
            "token_ids" and optionally "segment_ids" (passed through).

    Returns:
        `(x, y, sample_weight)`: x a dict with "token_ids" (masked),
        "padding_mask", "mask_positions" (batch, mask_selection_length) and
        "segment_ids" if given; y the original ids at those positions;
        sample_weight 1.0 for real selections and 0.0 for padded slots.

    Example:
    >>> masker = keras_tfm.models.MaskedLMMasker(
    ...     vocabulary_size=50, mask_token_id=3, mask_selection_length=2)
    >>> x, y, w = masker(np.array([[1, 8, 9, 10, 2, 0]]))
    >>> x["mask_positions"].shape, y.shape, w.shape
    (TensorShape([1, 2]), TensorShape([1, 2]), TensorShape([1, 2]))

    Pretraining with new masks at every epoch:
    >>> batches = tf.data.Dataset.from_tensor_slices(ids).shuffle(1000).batch(32)
    >>> steps = int(batches.cardinality())
    >>> mlm.fit(batches.repeat().map(masker), epochs=4, steps_per_epoch=steps)
    """

    def __init__(
        self,
        vocabulary_size,
        mask_token_id,
        mask_selection_length,
        mask_selection_rate=0.15,
        unselectable_token_ids=(),
        padding_id=0,
        mask_token_rate=0.8,
        random_token_rate=0.1,
    ):
        self.vocabulary_size = check_positive_int("vocabulary_size", vocabulary_size)
        self.mask_token_id = check_token_id(
            "mask_token_id", mask_token_id, vocabulary_size
        )
        self.mask_selection_length = check_positive_int(
            "mask_selection_length", mask_selection_length
        )
        self.mask_selection_rate = _check_fraction(
            "mask_selection_rate", mask_selection_rate
        )
        self.unselectable_token_ids = [
            check_token_id("unselectable_token_ids", i, vocabulary_size)
            for i in unselectable_token_ids
        ]
        self.padding_id = check_token_id("padding_id", padding_id, vocabulary_size)
        self.mask_token_rate = _check_fraction("mask_token_rate", mask_token_rate)
        self.random_token_rate = _check_fraction("random_token_rate", random_token_rate)
        if self.mask_token_rate + self.random_token_rate > 1.0:
            raise ValueError(
                "`mask_token_rate + random_token_rate` must be at most 1. "
                f"Received: mask_token_rate={mask_token_rate}, "
                f"random_token_rate={random_token_rate}"
            )
        generator = dict(
            vocabulary_size=vocabulary_size,
            mask_selection_rate=self.mask_selection_rate,
            mask_token_id=mask_token_id,
            mask_selection_length=self.mask_selection_length,
            unselectable_token_ids=sorted(
                set(self.unselectable_token_ids) | {padding_id}
            ),
            mask_token_rate=self.mask_token_rate,
            random_token_rate=self.random_token_rate,
        )
        # The TensorFlow path, also eagerly: the same sampler eagerly and in
        # tf.data on TensorFlow, and tensors (not Python lists) out.
        self._generator = keras_hub.layers.MaskedLMMaskGenerator(
            **generator, **MASK_GENERATOR_TF_ONLY
        )
        # keras-hub's Python path (an eager call), for the other backends.
        self._python_generator = keras_hub.layers.MaskedLMMaskGenerator(**generator)

    def __call__(self, inputs):
        segment_ids = None
        if isinstance(inputs, dict):
            unknown = sorted(set(inputs) - {"token_ids", "segment_ids"})
            if unknown or "token_ids" not in inputs:
                raise ValueError(
                    "`inputs` must be token ids or a dict with 'token_ids' and "
                    f"optionally 'segment_ids'. Received: keys={sorted(inputs)}"
                )
            segment_ids = inputs.get("segment_ids")
            inputs = inputs["token_ids"]
        if not use_tf_graph(inputs) and keras.backend.backend() != "tensorflow":
            return self._call_python(inputs, segment_ids)
        token_ids = tf.convert_to_tensor(inputs)
        dtype = token_ids.dtype
        _check_ids(token_ids.shape.rank, token_ids.shape, dtype.is_integer, dtype.name)
        masked = self._generator(token_ids)
        x = {
            "token_ids": masked["token_ids"],
            "padding_mask": tf.not_equal(token_ids, self.padding_id),
            "mask_positions": masked["mask_positions"],
        }
        if segment_ids is not None:
            x["segment_ids"] = tf.convert_to_tensor(segment_ids)
        return x, masked["mask_ids"], masked["mask_weights"]

    def _call_python(self, inputs, segment_ids=None):
        """The Python path: NumPy checks, keras-hub's Python sampler,
        tensors of the Keras backend out."""
        token_ids = np.asarray(keras.ops.convert_to_numpy(inputs))
        dtype = token_ids.dtype
        _check_ids(token_ids.ndim, token_ids.shape,
                   np.issubdtype(dtype, np.integer), dtype.name)  # fmt: skip
        masked = self._python_generator(token_ids)
        x = {
            "token_ids": masked["token_ids"],
            "padding_mask": keras.ops.convert_to_tensor(token_ids != self.padding_id),
            "mask_positions": masked["mask_positions"],
        }
        if segment_ids is not None:
            x["segment_ids"] = keras.ops.convert_to_tensor(segment_ids)
        return x, masked["mask_ids"], masked["mask_weights"]

    def get_config(self):
        return {
            "vocabulary_size": self.vocabulary_size,
            "mask_token_id": self.mask_token_id,
            "mask_selection_length": self.mask_selection_length,
            "mask_selection_rate": self.mask_selection_rate,
            "unselectable_token_ids": list(self.unselectable_token_ids),
            "padding_id": self.padding_id,
            "mask_token_rate": self.mask_token_rate,
            "random_token_rate": self.random_token_rate,
        }

    @classmethod
    def from_config(cls, config):
        return cls(**config)

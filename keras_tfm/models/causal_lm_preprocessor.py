import keras
import keras_hub
import numpy as np

from keras_tfm._optional import tensorflow as tf
from keras_tfm._optional import use_tf_graph
from keras_tfm.models.chat_examples import (
    as_chat_examples,
    chat_example_ids,
    is_chat_examples,
)
from keras_tfm.models.preprocessor import (
    PackedLength,
    Preprocessor,
    as_backend_tensors,
    is_text,
)
from keras_tfm.validation import check_choice

PADDINGS = ("longest", "max_length")


def _bucket(needed, sequence_length, xp):
    """The smallest power of two >= `needed` (at least 1), at most
    `sequence_length`; `xp` is NumPy or TensorFlow (inside `tf.data`)."""
    powers = [2**k for k in range(max(sequence_length - 1, 1).bit_length() + 1)]
    powers = xp.constant(powers) if xp is not np else np.asarray(powers)
    fits = powers[powers >= xp.maximum(needed, 1)]
    return xp.minimum(fits[0], sequence_length)


@keras.saving.register_keras_serializable(package="keras_tfm")
class CausalLMPreprocessor(Preprocessor):
    """Strings to next-token training pairs, and text in and out of `generate`.

    Called on a batch of strings `x` (inside `tf.data` too) it returns
    `(token_ids, labels, sample_weight)`: each text tokenized, followed by
    the end token, cut to `sequence_length + 1` ids and padded to the
    length `L + 1` that `padding` chooses, giving ids `t`; then
    `token_ids = t[:, :-1]`, `labels = t[:, 1:]` and `sample_weight` 1
    where the label is a real token. With `padding="longest"` (the default)
    `L` is the batch's longest row rounded up to a power of two, at most
    `sequence_length`: short chats train on short rows, not on the
    context's length, and shapes come in few sizes (one compile each).
    A list of chat examples (`{"messages": [...]}` dicts or `(prompt,
    answer)` pairs, `keras_tfm.models.chat_examples`) is packed the same
    way, with `sample_weight` 1 only where the label is an answer's token
    (the Python path, on every backend): the loss of supervised fine-tuning.
    Integer `x` (ids already) passes through unchanged, with `y` and
    `sample_weight`. Inside `tf.data` it is TensorFlow ops; eagerly it is
    Python (no TensorFlow needed), with the same ids.

    For `CausalLM.generate`, `generate_preprocess` turns prompts into id
    lists and `generate_postprocess` turns ids back into clean text.

    Args:
        tokenizer: a keras-hub tokenizer (e.g. a `BytePairTokenizer`).
        sequence_length: the length of the training windows.
        add_end_token: whether each text ends with the tokenizer's end token
            (when it has one).
        padding_id: the id written into padded slots (the backbone's
            `padding_id`).
        padding: "longest" (the batch's longest row, bucketed as above) or
            "max_length" (every row `sequence_length`: one shape).

    Example:
    >>> tokenizer = keras_hub.tokenizers.ByteTokenizer()
    >>> preprocessor = keras_tfm.models.CausalLMPreprocessor(
    ...     tokenizer, sequence_length=4)
    >>> x, y, weight = preprocessor(["abc", "a"])
    >>> x.numpy().tolist(), y.numpy().tolist(), weight.numpy().tolist()
    ([[97, 98], [97, 0]], [[98, 99], [0, 0]], [[1, 1], [0, 0]])
    >>> preprocessor.padding = "max_length"
    >>> preprocessor(["abc"])[0].numpy().tolist()
    [[97, 98, 99, 0]]
    """

    sequence_length = PackedLength("packer", extra=1)

    def __init__(
        self,
        tokenizer,
        sequence_length=128,
        add_end_token=True,
        padding_id=0,
        padding="longest",
        **kwargs,
    ):
        super().__init__(tokenizer, **kwargs)
        self.sequence_length = sequence_length
        self.add_end_token = bool(add_end_token)
        self.padding_id = padding_id
        self.padding = check_choice("padding", padding, PADDINGS)
        end = self.end_token_id if self.add_end_token else None
        self.packer = keras_hub.layers.StartEndPacker(
            sequence_length=self.sequence_length + 1,
            end_value=end,
            pad_value=0 if padding_id is None else padding_id,
            return_padding_mask=True,
            name="packer",
        )

    def call(self, x, y=None, sample_weight=None):
        if not use_tf_graph(x):
            return self._call_python(x, y, sample_weight)
        x = tf.convert_to_tensor(x) if not isinstance(x, tf.RaggedTensor) else x
        if x.dtype != tf.string:
            return keras.utils.pack_x_y_sample_weight(x, y, sample_weight)
        ids, mask = self.packer(self.tokenizer(x))
        ids = tf.cast(ids, "int32")
        if self.padding == "longest":
            real = tf.reduce_sum(tf.cast(mask, "int32"), axis=-1)
            length = _bucket(tf.reduce_max(real) - 1, self.sequence_length, tf)
            ids, mask = ids[..., : length + 1], mask[..., : length + 1]
        return keras.utils.pack_x_y_sample_weight(
            ids[..., :-1], ids[..., 1:], tf.cast(mask[..., 1:], "int32")
        )

    def _call_python(self, x, y, sample_weight):
        if is_chat_examples(x):
            return self._pack_chats(as_chat_examples(x), sample_weight)
        if not is_text(x):
            return keras.utils.pack_x_y_sample_weight(x, y, sample_weight)
        ids, mask = (
            np.asarray(keras.ops.convert_to_numpy(t))
            for t in self.packer(self.tokenizer(x))
        )
        ids = ids.astype("int32")
        if self.padding == "longest":
            length = _bucket(int(mask.sum(-1).max()) - 1, self.sequence_length, np)
            ids, mask = ids[..., : length + 1], mask[..., : length + 1]
        return as_backend_tensors(
            ids[..., :-1], ids[..., 1:], mask[..., 1:].astype("int32")
        )

    def _pack_chats(self, examples, sample_weight=None):
        """Chat examples to `(token_ids, labels, sample_weight)`, the weight 1
        where the label is an answer's token (`chat_examples`), times the
        example's own weight when `sample_weight` gives one per example."""
        rows = [chat_example_ids(self, example) for example in examples]
        longest = max(len(ids) for ids, _ in rows)
        length = self.sequence_length
        if self.padding == "longest":
            length = _bucket(min(longest, length + 1) - 1, length, np)
        ids = np.full((len(rows), length + 1), self.packer.pad_value, "int32")
        answer = np.zeros((len(rows), length + 1), "int32")
        for i, (row_ids, row_answer) in enumerate(rows):
            n = min(len(row_ids), length + 1)  # longer chats are cut at the end
            ids[i, :n], answer[i, :n] = row_ids[:n], row_answer[:n]
        weight = answer[:, 1:]
        if sample_weight is not None:
            given = np.asarray(keras.ops.convert_to_numpy(sample_weight), "float32")
            weight = weight * given.reshape(len(rows), 1)
        return as_backend_tensors(ids[:, :-1], ids[:, 1:], weight)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "sequence_length": self.sequence_length,
                "add_end_token": self.add_end_token,
                "padding_id": self.padding_id,
                "padding": self.padding,
            }
        )
        return config

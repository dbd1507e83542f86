import keras
from keras import ops

from keras_tfm.layers.positions import is_per_row
from keras_tfm.validation import check_positive_int, check_rank


@keras.saving.register_keras_serializable(package="keras_tfm")
class LearnedPositionalEmbedding(keras.layers.Layer):
    """A trained vector per position, added to the input (as in BERT and GPT-2).

        outputs[b, t] = inputs[b, t] + P[start_index + t]

    with `P` a (max_sequence_length, hidden_dim) weight. A sequence longer than
    `max_sequence_length` is refused with a `ValueError`. The Keras mask of
    the input passes through.

    Args:
        max_sequence_length: the number of positions with a vector.
        embeddings_initializer: initializer of `P`.

    Call arguments:
        inputs: a float tensor of shape (batch, seq, hidden_dim).
        start_index: the position of the first token (cached decoding): an
            int, a scalar tensor, or a (batch,) vector with one per row.

    Returns:
        `inputs + P[start_index : start_index + seq]`, same shape as `inputs`.

    Example:
    >>> layer = keras_tfm.layers.LearnedPositionalEmbedding(max_sequence_length=16)
    >>> layer(np.zeros((2, 5, 8), "float32")).shape
    TensorShape([2, 5, 8])
    """

    def __init__(
        self,
        max_sequence_length,
        embeddings_initializer="glorot_uniform",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.max_sequence_length = check_positive_int(
            "max_sequence_length", max_sequence_length
        )
        self.embeddings_initializer = keras.initializers.get(embeddings_initializer)
        self.supports_masking = True

    # `input_shape` in both `build` and `compute_output_shape`: Keras records
    # the build argument by name and `summary()` passes it back by that name.
    def build(self, input_shape):
        self.embeddings = self.add_weight(
            name="embeddings",
            shape=(self.max_sequence_length, input_shape[-1]),
            initializer=self.embeddings_initializer,
        )

    def call(self, inputs, start_index=0):
        check_rank("inputs", inputs, 3, "(batch, seq, hidden_dim)")
        seq_len = inputs.shape[1]
        if seq_len is not None and isinstance(start_index, int):
            if start_index + seq_len > self.max_sequence_length:
                raise ValueError(
                    f"The sequence is longer than `max_sequence_length`="
                    f"{self.max_sequence_length}. Received: sequence length "
                    f"{seq_len} with start_index={start_index}"
                )
        seq_len = ops.shape(inputs)[1]
        if isinstance(start_index, int):
            # A tensor, not the variable: JAX refuses a Keras variable here.
            table = ops.convert_to_tensor(self.embeddings)
            positions = ops.slice(
                table, (start_index, 0), (seq_len, self.embeddings.shape[-1])
            )
        elif is_per_row(start_index):  # (batch,): one start per row
            rows = ops.expand_dims(ops.cast(start_index, "int32"), 1)
            positions = ops.take(self.embeddings, rows + ops.arange(seq_len), 0)
        else:  # XLA compiles a slice once per start value; a gather once.
            positions = ops.take(self.embeddings, ops.arange(seq_len) + start_index, 0)
        return inputs + ops.cast(positions, inputs.dtype)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "max_sequence_length": self.max_sequence_length,
                "embeddings_initializer": keras.initializers.serialize(
                    self.embeddings_initializer
                ),
            }
        )
        return config

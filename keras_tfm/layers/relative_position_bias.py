"""T5's relative position bias: one learned scalar per head and distance bucket."""

import math

import keras
from keras import ops

from keras_tfm.layers.hyperparameters import as_bool
from keras_tfm.validation import check_positive_int


def relative_position_bucket(
    relative_position, bidirectional, num_buckets, max_distance
):
    """The bucket of each `key - query` distance, as T5 numbers them.

    Half the buckets (all of them when causal) hold the distances below
    `num_buckets // 2` one each, the rest cover the distances up to
    `max_distance` on a log scale, and every longer distance shares the last
    bucket. Bidirectional: the keys after the query take the upper half of
    the buckets. Causal: keys after the query (masked anyway) are distance 0.
    The log is taken in float32, as T5's (and transformers') own code does:
    a distance on a bucket edge falls where theirs does.

    Args:
        relative_position: int tensor of `key_position - query_position`.
        bidirectional: the encoder's (True) or the decoder's (False) kind.
        num_buckets: the number of buckets.
        max_distance: where the log-spaced buckets end.

    Returns:
        int32 bucket ids, the shape of `relative_position`.

    Example:
    >>> np.asarray(relative_position_bucket(
    ...     np.array([-3, -1, 0, 1, 3]), True, 8, 16)).tolist()
    [2, 1, 0, 5, 6]
    """
    relative_position = ops.cast(relative_position, "int32")
    bucket = ops.zeros_like(relative_position)
    if bidirectional:
        num_buckets //= 2
        bucket = ops.cast(relative_position > 0, "int32") * num_buckets
        distance = ops.abs(relative_position)
    else:
        distance = ops.maximum(-relative_position, 0)
    max_exact = num_buckets // 2
    # Distance 0 never takes the log branch; 1 keeps the log finite there.
    scaled = ops.log(ops.cast(ops.maximum(distance, 1), "float32") / max_exact)
    scaled = scaled / math.log(max_distance / max_exact) * (num_buckets - max_exact)
    large = ops.minimum(max_exact + ops.cast(scaled, "int32"), num_buckets - 1)
    return bucket + ops.where(distance < max_exact, distance, large)


@keras.saving.register_keras_serializable(package="keras_tfm")
class RelativePositionBias(keras.layers.Layer):
    """The additive attention bias of T5 (Raffel et al., 2020, section 2.1).

        bias[h, i, j] = E[bucket(j - i), h]

    for query position i and key position j, with `relative_position_bucket`
    and E a learned (num_buckets, num_heads) table (`embeddings`). T5
    computes it once per stack (its first layer holds E) and adds it to the
    self-attention logits of every layer; pass it as `attention_bias`.

    Args:
        num_heads: the attention heads.
        num_buckets: the buckets (32 in T5).
        max_distance: the distance where the last bucket starts (128 in T5).
        bidirectional: True in the encoder, False in the (causal) decoder.
        embeddings_initializer: the initializer of the table.

    Call arguments (by keyword: Keras takes only tensors positionally):
        query_length: the number of queries.
        key_length: the number of keys (the cache's length in cached decoding).
        query_start: the position of the first query: an int, a scalar
            tensor or a (batch,) tensor (one start per row).

    Returns:
        float32 (1, num_heads, query_length, key_length); (batch, ...) when
        `query_start` has one start per row.

    Example:
    >>> bias = keras_tfm.layers.RelativePositionBias(num_heads=2)
    >>> bias(query_length=3, key_length=5).shape
    TensorShape([1, 2, 3, 5])
    """

    def __init__(
        self,
        num_heads,
        num_buckets=32,
        max_distance=128,
        bidirectional=True,
        embeddings_initializer="glorot_uniform",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_heads = check_positive_int("num_heads", num_heads)
        self.num_buckets = check_positive_int("num_buckets", num_buckets)
        self.max_distance = check_positive_int("max_distance", max_distance)
        self.bidirectional = as_bool("bidirectional", bidirectional)
        exact = self.num_buckets // (2 if self.bidirectional else 1) // 2
        if exact < 1 or self.max_distance <= exact:
            raise ValueError(
                "`num_buckets` must leave at least one exact bucket (2 or more; 4 "
                "or more bidirectional) and `max_distance` must exceed the exact "
                f"buckets ({exact}). Received: num_buckets={num_buckets}, "
                f"max_distance={max_distance}, bidirectional={bidirectional}"
            )
        self.embeddings_initializer = keras.initializers.get(embeddings_initializer)

    def build(self, input_shape=None):
        self.embeddings = self.add_weight(
            shape=(self.num_buckets, self.num_heads),
            initializer=self.embeddings_initializer,
            name="embeddings",
        )

    def call(self, query_length, key_length, query_start=0):
        start = ops.cast(query_start, "int32")
        queries = ops.arange(query_length, dtype="int32")
        if len(start.shape) == 1:  # one start per row: (batch, q_len)
            queries = start[:, None] + queries[None, :]
        else:
            queries = (start + queries)[None, :]  # (1, q_len)
        keys = ops.arange(key_length, dtype="int32")
        buckets = relative_position_bucket(
            keys[None, None, :] - queries[:, :, None],
            self.bidirectional,
            self.num_buckets,
            self.max_distance,
        )  # (batch or 1, q_len, k_len)
        bias = ops.take(self.embeddings, buckets, axis=0)  # (B, T, S, heads)
        return ops.cast(ops.transpose(bias, (0, 3, 1, 2)), "float32")

    def compute_output_shape(self, query_length, key_length, query_start=0):
        return (1, self.num_heads, query_length, key_length)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "num_buckets": self.num_buckets,
                "max_distance": self.max_distance,
                "bidirectional": self.bidirectional,
                "embeddings_initializer": keras.initializers.serialize(
                    self.embeddings_initializer
                ),
            }
        )
        return config

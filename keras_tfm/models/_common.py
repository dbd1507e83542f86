"""What the three model families share, written once.

`DecoderBackbone`, `EncoderBackbone` and `Seq2SeqBackbone` derive from
`TransformerModel`, which checks the constructor arguments they have in
common, makes the sublayers they build alike (position embedding, norms,
embedding dropout, the output projection) and lists the arguments in
`get_config`. A family adds only what is its own (the layer counts,
segments) and calls `super()` for the rest.
"""

import keras
from keras import ops

from keras_tfm.layers.hyperparameters import CHECKS, one_of, store_checked
from keras_tfm.layers.learned_positional_embedding import LearnedPositionalEmbedding
from keras_tfm.layers.normalization import make_normalization
from keras_tfm.layers.positional_encoding import PositionalEncoding
from keras_tfm.layers.transformer_block import BLOCK_ARGUMENTS
from keras_tfm.models.quantization import QuantizationMixin
from keras_tfm.quantized_weights import QuantizableDense
from keras_tfm.validation import check_choice, check_heads, check_rank, check_token_id

# Where positions enter: added to the embeddings ("learned" table,
# "sinusoidal" formula with sine and cosine interleaved, "sinusoidal_split"
# with them in two halves as Marian has them) or rotated into queries and
# keys ("rotary").
POSITION_ENCODINGS = ("learned", "sinusoidal", "sinusoidal_split", "rotary")

# The constructor arguments every family takes, in `get_config` order: the
# embedding's and those of its blocks (`position_encoding` in place of their
# `use_rotary`).
SHARED_ARGUMENTS = (
    "vocabulary_size",
    "hidden_dim",
    "max_sequence_length",
    *(
        "position_encoding" if name == "use_rotary" else name
        for name in BLOCK_ARGUMENTS
    ),
    "padding_id",
)
# Their checks (`padding_id` is checked against `vocabulary_size`).
SHARED_CHECKS = {
    **{name: CHECKS[name] for name in SHARED_ARGUMENTS if name in CHECKS},
    "position_encoding": one_of(POSITION_ENCODINGS),
}


def padding_mask_of(token_ids, padding_id):
    """The (batch, seq) bool mask of real tokens; all True when `padding_id` is None.

    Example:
    >>> ops.convert_to_numpy(padding_mask_of(np.array([[5, 0, 7]]), 0))
    array([[ True, False,  True]])
    >>> ops.convert_to_numpy(padding_mask_of(np.array([[5, 0, 7]]), None))
    array([[ True,  True,  True]])
    """
    if padding_id is None:
        return ops.ones(ops.shape(token_ids), "bool")
    return ops.not_equal(token_ids, padding_id)


def check_token_ids(name, token_ids, max_sequence_length):
    """Rank 2, integer dtype, at most `max_sequence_length` long."""
    check_rank(name, token_ids, 2, "(batch, seq)")
    dtype = keras.backend.standardize_dtype(token_ids.dtype)
    if "int" not in dtype:
        raise ValueError(
            f"`{name}` must hold integer token ids. Received: {name}.dtype={dtype}"
        )
    length = token_ids.shape[1]
    if length is not None and length > max_sequence_length:
        raise ValueError(
            f"`{name}` is longer than max_sequence_length={max_sequence_length}. "
            f"Received: {name}.shape={tuple(token_ids.shape)}"
        )


def make_position_embedding(
    position_encoding,
    max_sequence_length,
    hidden_dim,
    dtype=None,
    name="position_embedding",
    embeddings_initializer="glorot_uniform",
):
    """The built layer adding positions to the embeddings; None for "rotary".

    Rotary positions are applied inside attention (`use_rotary` of the blocks)
    and need no layer here.
    """
    check_choice("position_encoding", position_encoding, POSITION_ENCODINGS)
    if position_encoding == "rotary":
        return None
    if position_encoding == "learned":
        layer = LearnedPositionalEmbedding(
            max_sequence_length,
            embeddings_initializer=embeddings_initializer,
            dtype=dtype,
            name=name,
        )
    else:
        layer = PositionalEncoding(
            interleave=position_encoding == "sinusoidal", dtype=dtype, name=name
        )
    layer.build((None, None, hidden_dim))
    return layer


def make_lm_head(backbone):
    """The bias-free Dense `lm_head` (hidden_dim -> vocabulary) of an untied model.

    It computes in float32 under a mixed policy, as the tied projection does
    (`TokenEmbedding(reverse_dtype="float32")`).
    """
    policy = backbone.dtype_policy
    if policy.compute_dtype != policy.variable_dtype:
        policy = keras.DTypePolicy(policy.variable_dtype)
    head = QuantizableDense(
        backbone.vocabulary_size, use_bias=False, dtype=policy, name="lm_head"
    )
    head.build((None, None, backbone.hidden_dim))
    return head


def make_logits_bias(vocabulary_size):
    """The layer adding a learned float32 bias (`logits_bias/bias`) to logits."""
    layer = _LogitsBias(vocabulary_size, name="logits_bias")
    layer.build()
    return layer


class _LogitsBias(keras.layers.Layer):
    """Adds one learned float32 bias per vocabulary entry to the logits."""

    def __init__(self, vocabulary_size, **kwargs):
        super().__init__(dtype="float32", **kwargs)
        self.vocabulary_size = vocabulary_size

    def build(self, inputs_shape=None):
        self.bias = self.add_weight(
            shape=(self.vocabulary_size,), initializer="zeros", name="bias"
        )

    def call(self, logits):
        return logits + self.bias


class TransformerModel(QuantizationMixin, keras.Model):
    """Base of the three families: shared arguments, sublayers and config.

    A family's constructor lists its arguments (all of `SHARED_ARGUMENTS`,
    with the family's defaults, and its own), calls `super().__init__` with
    the Keras ones (`name`, `dtype`, ...) and then
    `self._store_arguments(locals())`: every argument is checked (a
    ValueError names it and quotes the value) and stored under its own name,
    and `get_config` lists them all, the shared ones first, then the
    family's `own_arguments` in their order.
    """

    # The family's own constructor arguments and their checks, by name.
    own_arguments = {}

    def _store_arguments(self, arguments):
        """Checks and stores the shared and the family's own `arguments`."""
        store_checked(self, arguments, {**SHARED_CHECKS, **self.own_arguments})
        check_heads(self.num_heads, self.head_dim, self.num_key_value_heads)
        if self.head_dim is None and self.hidden_dim % self.num_heads:
            raise ValueError(
                "`hidden_dim` must be divisible by `num_heads`, or pass "
                f"`head_dim`. Received: hidden_dim={self.hidden_dim}, "
                f"num_heads={self.num_heads}"
            )
        self.padding_id = check_token_id(
            "padding_id", arguments["padding_id"], self.vocabulary_size, optional=True
        )

    @property
    def fill_id(self):
        """The id written into padded slots: `padding_id`, or 0 without one."""
        return 0 if self.padding_id is None else self.padding_id

    def padding_mask_of(self, token_ids):
        """The (batch, seq) bool mask of the tokens that are not `padding_id`."""
        return padding_mask_of(token_ids, self.padding_id)

    def _make_position_embedding(self, name="position_embedding", **kwargs):
        return make_position_embedding(
            self.position_encoding,
            self.max_sequence_length,
            self.hidden_dim,
            dtype=self.dtype_policy,
            name=name,
            **kwargs,
        )

    def _embed(self, token_ids, position_embedding, dropout, start_index=0, **kwargs):
        """Token plus position embeddings (batch, seq, hidden_dim), dropped out.

        `position_embedding` is None with rotary positions; `kwargs` are the
        dropout's (`training`).
        """
        x = self.token_embedding(token_ids)
        if position_embedding is not None:
            x = position_embedding(x, start_index=start_index)
        return dropout(x, **kwargs)

    def _make_norm(self, name):
        return make_normalization(
            self.normalization,
            self.layer_norm_epsilon,
            self.dtype_policy,
            name,
            hidden_dim=self.hidden_dim,
        )

    def _make_dropout(self, name):
        layer = keras.layers.Dropout(self.dropout, dtype=self.dtype_policy, name=name)
        layer.build((None, None, self.hidden_dim))
        return layer

    def _block_arguments(self, **overrides):
        """The constructor arguments of this model's Transformer blocks."""
        # The blocks take the model's arguments of the same names; their
        # `use_rotary` is the model's `position_encoding == "rotary"`.
        arguments = {
            name: getattr(self, name) for name in BLOCK_ARGUMENTS if hasattr(self, name)
        }
        arguments.update(
            use_rotary=self.position_encoding == "rotary", dtype=self.dtype_policy
        )
        arguments.update(overrides)
        return arguments

    def get_config(self):
        config = super().get_config()
        for name in (*SHARED_ARGUMENTS, *self.own_arguments):
            config[name] = getattr(self, name)
        return self._add_quantization_config(config)

import functools

import keras
from keras import ops

from keras_tfm.layers.token_embedding import TokenEmbedding
from keras_tfm.layers.transformer_encoder_block import TransformerEncoderBlock
from keras_tfm.models._common import TransformerModel
from keras_tfm.models.preset_loading import PresetMixin
from keras_tfm.validation import (
    check_int_at_least,
    check_mask_shape,
    check_positive_int,
    check_rank,
)

INPUT_KEYS = ("token_ids", "segment_ids", "padding_mask")


def _bert_initializer():
    # BERT initializes every weight from N(0, 0.02) (truncated, as keras-hub).
    return keras.initializers.TruncatedNormal(stddev=0.02)


def _check_integer(name, tensor):
    dtype = keras.backend.standardize_dtype(tensor.dtype)
    if "int" not in dtype:
        raise ValueError(
            f"`{name}` must hold integer ids. Received: {name}.dtype={dtype}"
        )


def check_per_layer(name, values, num_layers):
    """None, or a list of `num_layers` positive ints (returned as a tuple).

    Example:
    >>> check_per_layer("num_heads_per_layer", [4, 2], 2)
    (4, 2)
    """
    if values is None:
        return None
    if not isinstance(values, (list, tuple)) or len(values) != num_layers:
        raise ValueError(
            f"`{name}` must be a list of {num_layers} positive integers, one "
            f"per layer. Received: {name}={values!r}"
        )
    return tuple(check_positive_int(name, value) for value in values)


def unpack_encoder_inputs(inputs, allowed_keys=INPUT_KEYS):
    """Returns a dict from a token-id tensor or a dict with `allowed_keys`."""
    if not isinstance(inputs, dict):
        return {"token_ids": inputs}
    unknown = sorted(set(inputs) - set(allowed_keys))
    if unknown or "token_ids" not in inputs:
        raise ValueError(
            f"`inputs` must be a token-id tensor or a dict with the key "
            f"'token_ids' and optionally {list(allowed_keys[1:])}. "
            f"Received: inputs.keys()={sorted(inputs)}"
        )
    return dict(inputs)


@keras.saving.register_keras_serializable(package="keras_tfm")
class EncoderBackbone(PresetMixin, TransformerModel):
    """A bidirectional Transformer encoder with BERT's architecture.

        h = Norm_emb(TokenEmb(ids) + PosEmb(positions) + SegmentEmb(segments))
        h = Dropout(h)
        h = Block_L(...Block_1(h))          post-LN blocks, as BERT

    With `normalize_first=True` the blocks are pre-LN and the normalization
    moves from the embeddings to after the last block (`final_norm`). Padded
    positions (ids equal to `padding_id`) are never attended to, so the hidden
    states at real positions do not depend on what the padding holds.

    Sublayers, by attribute and layer name (a checkpoint converter maps weights by
    them): `token_embedding` (TokenEmbedding, tied with the MLM head),
    `position_embedding` (LearnedPositionalEmbedding, a weightless
    PositionalEncoding when sinusoidal, absent when rotary), `segment_embedding`
    (Embedding, absent when `num_segments=0`), `embeddings_layer_norm` (absent when
    `normalize_first`), `embeddings_dropout`, `transformer_layers[i]` named
    `transformer_layer_{i}` (TransformerEncoderBlock: `self_attention` with `query`,
    fused `key_value` (keys first) and `attention_output`; `self_attention_norm`;
    `feed_forward` with `intermediate` and `output`; `feed_forward_norm`), and
    `final_norm` (only when `normalize_first`).

    Args:
        vocabulary_size: number of token ids.
        num_layers: number of encoder blocks.
        num_heads: attention heads per block.
        hidden_dim: width of the hidden states.
        intermediate_dim: inner width of the feed-forward networks.
        max_sequence_length: the longest sequence accepted.
        num_segments: number of segment (token type) ids; 0 for none.
        head_dim: size of each head; by default `hidden_dim // num_heads`.
        num_key_value_heads: fewer key/value heads for grouped-query attention.
        activation: the FFN's "gelu" (exact erf, BERT's), "relu", "silu" or
            "swiglu".
        dropout: dropout rate of the embeddings, attention and sublayers.
        normalize_first: pre-LN blocks with a final norm if True.
        normalization: "layer_norm" or "rms_norm".
        layer_norm_epsilon: epsilon of every normalization layer.
        position_encoding: "learned" (BERT), "sinusoidal",
            "sinusoidal_split" (sines and cosines in two halves) or "rotary".
        rotary_max_wavelength: the RoPE base with rotary positions.
        use_bias: whether the attention and feed-forward projections have
            biases.
        padding_id: the id of padding tokens, or None if ids never pad.
        num_heads_per_layer: optional list of `num_layers` head counts, one
            per block (a pruned model's); the heads keep the size
            `head_dim` (by default `hidden_dim // num_heads`, of the
            unpruned `num_heads`). Not with `num_key_value_heads`.
        intermediate_dim_per_layer: optional list of `num_layers`
            feed-forward widths, one per block, in place of
            `intermediate_dim`.

    Call arguments:
        inputs: int token ids (batch, seq), or a dict with "token_ids" and
            optionally "segment_ids" (batch, seq) and "padding_mask" (batch,
            seq; 1 = real token, overriding `token_ids != padding_id`).
        training: whether dropout is active.
        return_attention_scores: also return every block's attention weights.

    Returns:
        Hidden states (batch, seq, hidden_dim); with
        `return_attention_scores=True`, `(hidden_states, scores)` where
        `scores` is a tuple of `num_layers` float32 tensors of shape
        (batch, num_heads, seq, seq).

    Example:
    >>> backbone = keras_tfm.models.EncoderBackbone(
    ...     vocabulary_size=50, num_layers=1, num_heads=2, hidden_dim=16,
    ...     intermediate_dim=32, max_sequence_length=8)
    >>> backbone(np.array([[2, 5, 7, 0]])).shape
    TensorShape([1, 4, 16])
    """

    own_arguments = {
        "num_layers": check_positive_int,
        "num_segments": functools.partial(
            check_int_at_least, minimum=0, requirement="a non-negative integer"
        ),
    }

    def __init__(
        self,
        vocabulary_size,
        num_layers,
        num_heads,
        hidden_dim,
        intermediate_dim,
        max_sequence_length,
        num_segments=2,
        head_dim=None,
        num_key_value_heads=None,
        activation="gelu",
        dropout=0.0,
        normalize_first=False,
        normalization="layer_norm",
        layer_norm_epsilon=1e-12,
        position_encoding="learned",
        rotary_max_wavelength=10000,
        use_bias=True,
        padding_id=0,
        num_heads_per_layer=None,
        intermediate_dim_per_layer=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        # Each argument above, checked, under its own name.
        self._store_arguments(locals())
        self.num_heads_per_layer = check_per_layer(
            "num_heads_per_layer", num_heads_per_layer, self.num_layers
        )
        self.intermediate_dim_per_layer = check_per_layer(
            "intermediate_dim_per_layer", intermediate_dim_per_layer, self.num_layers
        )
        if self.num_heads_per_layer and self.num_key_value_heads is not None:
            raise ValueError(
                "`num_heads_per_layer` does not combine with grouped-query "
                "attention. Received: num_key_value_heads="
                f"{self.num_key_value_heads}"
            )

        # All sublayers are built here, so the model has its weights (and a
        # checkpoint can be loaded) before it is first called.
        hidden_shape = (None, None, self.hidden_dim)
        policy = self.dtype_policy
        self.token_embedding = TokenEmbedding(
            self.vocabulary_size,
            self.hidden_dim,
            embeddings_initializer=_bert_initializer(),
            dtype=policy,
            name="token_embedding",
        )
        self.token_embedding.build((None, None))
        self.position_embedding = self._make_position_embedding(
            embeddings_initializer=_bert_initializer()
        )
        self.segment_embedding = None
        if num_segments:
            self.segment_embedding = keras.layers.Embedding(
                num_segments,
                self.hidden_dim,
                embeddings_initializer=_bert_initializer(),
                dtype=policy,
                name="segment_embedding",
            )
            self.segment_embedding.build((None, None))
        self.embeddings_layer_norm = None
        if not self.normalize_first:
            self.embeddings_layer_norm = self._make_norm("embeddings_layer_norm")
        self.embeddings_dropout = self._make_dropout("embeddings_dropout")
        self.transformer_layers = []
        for i in range(self.num_layers):
            block = TransformerEncoderBlock(
                **self._block_arguments(
                    kernel_initializer=_bert_initializer(), **self._layer_shape(i)
                ),
                name=f"transformer_layer_{i}",
            )
            block.build(hidden_shape)
            self.transformer_layers.append(block)
        self.final_norm = None
        if self.normalize_first:
            self.final_norm = self._make_norm("final_norm")
        self.built = True

    def _layer_shape(self, index):
        """Block `index`'s heads and feed-forward width, where they are its own."""
        shape = {}
        if self.num_heads_per_layer:
            shape["num_heads"] = self.num_heads_per_layer[index]
            shape["head_dim"] = self.head_dim or self.hidden_dim // self.num_heads
        if self.intermediate_dim_per_layer:
            shape["intermediate_dim"] = self.intermediate_dim_per_layer[index]
        return shape

    def _check_inputs(self, inputs):
        token_ids = inputs["token_ids"]
        check_rank("token_ids", token_ids, 2, "(batch, seq)")
        _check_integer("token_ids", token_ids)
        seq_len = token_ids.shape[1]
        if seq_len is not None and seq_len > self.max_sequence_length:
            raise ValueError(
                f"The sequence is longer than `max_sequence_length`="
                f"{self.max_sequence_length}. Received: token_ids.shape="
                f"{tuple(token_ids.shape)}"
            )
        segment_ids = inputs.get("segment_ids")
        if segment_ids is not None:
            if self.segment_embedding is None:
                raise ValueError(
                    "`segment_ids` were given but the backbone has no segment "
                    f"embedding. Received: num_segments={self.num_segments}"
                )
            check_mask_shape("segment_ids", segment_ids, tuple(token_ids.shape))
            _check_integer("segment_ids", segment_ids)
        check_mask_shape(
            "padding_mask", inputs.get("padding_mask"), tuple(token_ids.shape)
        )

    def padding_mask(self, inputs):
        """The (batch, seq) boolean mask of real tokens the model uses."""
        inputs = unpack_encoder_inputs(inputs)
        mask = inputs.get("padding_mask")
        if mask is not None:
            return ops.cast(mask, "bool")
        return self.padding_mask_of(inputs["token_ids"])

    def call(self, inputs, training=None, return_attention_scores=False):
        inputs = unpack_encoder_inputs(inputs)
        self._check_inputs(inputs)
        token_ids = inputs["token_ids"]
        padding_mask = self.padding_mask(inputs)

        x = self.token_embedding(token_ids)
        if self.position_embedding is not None:
            x = self.position_embedding(x)
        if self.segment_embedding is not None:
            segment_ids = inputs.get("segment_ids")
            if segment_ids is None:
                segment_ids = ops.zeros_like(token_ids)
            x = x + self.segment_embedding(segment_ids)
        if self.embeddings_layer_norm is not None:
            x = self.embeddings_layer_norm(x)
        x = self.embeddings_dropout(x, training=training)

        scores = []
        for block in self.transformer_layers:
            if return_attention_scores:
                x, layer_scores = block(
                    x,
                    padding_mask=padding_mask,
                    return_attention_scores=True,
                    training=training,
                )
                scores.append(layer_scores)
            else:
                x = block(x, padding_mask=padding_mask, training=training)
        if self.final_norm is not None:
            x = self.final_norm(x)
        return (x, tuple(scores)) if return_attention_scores else x

    def get_config(self):
        config = super().get_config()
        # Written only when set: the configs of unpruned models stay as they were.
        for name in ("num_heads_per_layer", "intermediate_dim_per_layer"):
            if getattr(self, name):
                config[name] = list(getattr(self, name))
        return config

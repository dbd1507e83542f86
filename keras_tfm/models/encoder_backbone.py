import keras
from keras import ops

from keras_tfm.layers.learned_positional_embedding import LearnedPositionalEmbedding
from keras_tfm.layers.positional_encoding import PositionalEncoding
from keras_tfm.layers.token_embedding import TokenEmbedding
from keras_tfm.layers.transformer_encoder_block import TransformerEncoderBlock
from keras_tfm.models.quantization import QuantizationMixin
from keras_tfm.validation import (
    ACTIVATIONS,
    NORMALIZATIONS,
    check_choice,
    check_mask_shape,
    check_positive_float,
    check_positive_int,
    check_rank,
    check_rate,
)

POSITION_ENCODINGS = ("learned", "sinusoidal")
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
class EncoderBackbone(QuantizationMixin, keras.Model):
    """A bidirectional Transformer encoder with BERT's architecture.

        h = Norm_emb(TokenEmb(ids) + PosEmb(positions) + SegmentEmb(segments))
        h = Dropout(h)
        h = Block_L(...Block_1(h))          post-LN blocks, as BERT

    With `normalize_first=True` the blocks are pre-LN and the normalization
    moves from the embeddings to after the last block (`final_norm`). Padded
    positions (ids equal to `padding_id`) are never attended to, so the hidden
    states at real positions do not depend on what the padding holds.

    Sublayers, by attribute and layer name (a checkpoint converter maps
    weights by them): `token_embedding` (TokenEmbedding, tied with the MLM
    head), `position_embedding` (LearnedPositionalEmbedding, or a weightless
    PositionalEncoding when sinusoidal), `segment_embedding` (Embedding, absent
    when `num_segments=0`), `embeddings_layer_norm` (absent when
    `normalize_first`), `embeddings_dropout`, `transformer_layers[i]` named
    `transformer_layer_{i}` (TransformerEncoderBlock: `self_attention` with
    `query`, fused `key_value` (keys first) and `attention_output`;
    `self_attention_norm`; `feed_forward` with `intermediate` and `output`;
    `feed_forward_norm`), and `final_norm` (only when `normalize_first`).

    Args:
        vocabulary_size: number of token ids.
        num_layers: number of encoder blocks.
        num_heads: attention heads per block.
        hidden_dim: width of the hidden states.
        intermediate_dim: inner width of the feed-forward networks.
        max_sequence_length: the longest sequence accepted.
        num_segments: number of segment (token type) ids; 0 for none.
        activation: the FFN's "gelu" (exact erf, BERT's), "relu" or "swiglu".
        dropout: dropout rate of the embeddings, attention and sublayers.
        normalize_first: pre-LN blocks with a final norm if True.
        normalization: "layer_norm" or "rms_norm".
        layer_norm_epsilon: epsilon of every normalization layer.
        position_encoding: "learned" (BERT) or "sinusoidal".
        padding_id: the id of padding tokens, or None if ids never pad.

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

    def __init__(
        self,
        vocabulary_size,
        num_layers,
        num_heads,
        hidden_dim,
        intermediate_dim,
        max_sequence_length,
        num_segments=2,
        activation="gelu",
        dropout=0.0,
        normalize_first=False,
        normalization="layer_norm",
        layer_norm_epsilon=1e-12,
        position_encoding="learned",
        padding_id=0,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.vocabulary_size = check_positive_int("vocabulary_size", vocabulary_size)
        self.num_layers = check_positive_int("num_layers", num_layers)
        self.num_heads = check_positive_int("num_heads", num_heads)
        self.hidden_dim = check_positive_int("hidden_dim", hidden_dim)
        self.intermediate_dim = check_positive_int("intermediate_dim", intermediate_dim)
        self.max_sequence_length = check_positive_int(
            "max_sequence_length", max_sequence_length
        )
        if (
            isinstance(num_segments, bool)
            or not isinstance(num_segments, int)
            or num_segments < 0
        ):
            raise ValueError(
                "`num_segments` must be a non-negative integer. "
                f"Received: num_segments={num_segments!r}"
            )
        self.num_segments = num_segments
        self.activation = check_choice("activation", activation, ACTIVATIONS)
        self.dropout = check_rate("dropout", dropout)
        self.normalize_first = bool(normalize_first)
        self.normalization = check_choice(
            "normalization", normalization, NORMALIZATIONS
        )
        self.layer_norm_epsilon = check_positive_float(
            "layer_norm_epsilon", layer_norm_epsilon
        )
        self.position_encoding = check_choice(
            "position_encoding", position_encoding, POSITION_ENCODINGS
        )
        if padding_id is not None and (
            isinstance(padding_id, bool)
            or not isinstance(padding_id, int)
            or not 0 <= padding_id < vocabulary_size
        ):
            raise ValueError(
                "`padding_id` must be None or an id in [0, vocabulary_size). "
                f"Received: padding_id={padding_id!r}"
            )
        self.padding_id = padding_id
        if hidden_dim % num_heads:
            raise ValueError(
                "`hidden_dim` must be divisible by `num_heads`. Received: "
                f"hidden_dim={hidden_dim}, num_heads={num_heads}"
            )

        # All sublayers are built here, so the model has its weights (and a
        # checkpoint can be loaded) before it is first called.
        hidden_shape = (None, None, hidden_dim)
        policy = self.dtype_policy
        self.token_embedding = TokenEmbedding(
            vocabulary_size,
            hidden_dim,
            embeddings_initializer=_bert_initializer(),
            dtype=policy,
            name="token_embedding",
        )
        self.token_embedding.build((None, None))
        if self.position_encoding == "learned":
            self.position_embedding = LearnedPositionalEmbedding(
                max_sequence_length,
                embeddings_initializer=_bert_initializer(),
                dtype=policy,
                name="position_embedding",
            )
            self.position_embedding.build(hidden_shape)
            # Workaround: its build() names the argument `inputs_shape` but its
            # compute_output_shape() `input_shape`, so `summary()` would fail
            # on the recorded build shapes.
            self.position_embedding._build_shapes_dict = {"input_shape": hidden_shape}
        else:
            self.position_embedding = PositionalEncoding(
                dtype=policy, name="position_embedding"
            )
            self.position_embedding.build(hidden_shape)
        self.segment_embedding = None
        if num_segments:
            self.segment_embedding = keras.layers.Embedding(
                num_segments,
                hidden_dim,
                embeddings_initializer=_bert_initializer(),
                dtype=policy,
                name="segment_embedding",
            )
            self.segment_embedding.build((None, None))
        self.embeddings_layer_norm = None
        if not self.normalize_first:
            self.embeddings_layer_norm = self._make_norm("embeddings_layer_norm")
        self.embeddings_dropout = keras.layers.Dropout(
            self.dropout, dtype=policy, name="embeddings_dropout"
        )
        self.embeddings_dropout.build(hidden_shape)
        self.transformer_layers = []
        for i in range(num_layers):
            block = TransformerEncoderBlock(
                num_heads=num_heads,
                intermediate_dim=intermediate_dim,
                activation=activation,
                dropout=self.dropout,
                normalize_first=self.normalize_first,
                normalization=normalization,
                layer_norm_epsilon=self.layer_norm_epsilon,
                kernel_initializer=_bert_initializer(),
                dtype=policy,
                name=f"transformer_layer_{i}",
            )
            block.build(hidden_shape)
            self.transformer_layers.append(block)
        self.final_norm = None
        if self.normalize_first:
            self.final_norm = self._make_norm("final_norm")
        self.built = True

    def _make_norm(self, name):
        if self.normalization == "rms_norm":
            norm = keras.layers.RMSNormalization(
                epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name=name
            )
        else:
            norm = keras.layers.LayerNormalization(
                epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name=name
            )
        norm.build((None, None, self.hidden_dim))
        return norm

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
        token_ids = inputs["token_ids"]
        if self.padding_id is None:
            return ops.ones(ops.shape(token_ids), "bool")
        return ops.not_equal(token_ids, self.padding_id)

    def call(self, inputs, training=None, return_attention_scores=False):
        inputs = unpack_encoder_inputs(inputs)
        self._check_inputs(inputs)
        token_ids = inputs["token_ids"]
        padding_mask = self.padding_mask(inputs)

        x = self.token_embedding(token_ids)
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
            x = block(
                x,
                padding_mask=padding_mask,
                return_attention_scores=return_attention_scores,
                training=training,
            )
            if return_attention_scores:
                x, layer_scores = x
                scores.append(layer_scores)
        if self.final_norm is not None:
            x = self.final_norm(x)
        return (x, tuple(scores)) if return_attention_scores else x

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "vocabulary_size": self.vocabulary_size,
                "num_layers": self.num_layers,
                "num_heads": self.num_heads,
                "hidden_dim": self.hidden_dim,
                "intermediate_dim": self.intermediate_dim,
                "max_sequence_length": self.max_sequence_length,
                "num_segments": self.num_segments,
                "activation": self.activation,
                "dropout": self.dropout,
                "normalize_first": self.normalize_first,
                "normalization": self.normalization,
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "position_encoding": self.position_encoding,
                "padding_id": self.padding_id,
            }
        )
        return self._add_quantization_config(config)

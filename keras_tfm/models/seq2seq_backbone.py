import keras
from keras import ops

from keras_tfm.kernels import kv_cache
from keras_tfm.layers.attention_cache import AttentionCache
from keras_tfm.layers.decoder_block import DecoderBlock
from keras_tfm.layers.hyperparameters import as_bool, one_of
from keras_tfm.layers.relative_position_bias import RelativePositionBias
from keras_tfm.layers.token_embedding import TokenEmbedding
from keras_tfm.layers.transformer_encoder_block import TransformerEncoderBlock
from keras_tfm.models._common import (
    POSITION_ENCODINGS,
    TransformerModel,
    check_token_ids,
)
from keras_tfm.models.preset_loading import PresetMixin
from keras_tfm.validation import check_positive_int, check_rate

# T5's positions: no embedding added, a bias on the self-attention logits
# (`RelativePositionBias`, bidirectional in the encoder, causal in the decoder).
RELATIVE = "relative"


@keras.saving.register_keras_serializable(package="keras_tfm")
class Seq2SeqBackbone(PresetMixin, TransformerModel):
    """The encoder-decoder stacks of "Attention Is All You Need", no head.

        memory = Encoder(E[source] * sqrt(d) + PE)
        h      = Decoder(E[target] * sqrt(d) + PE, memory)   causal + cross

    One embedding matrix E is shared by the source and the target (and, in
    `Seq2SeqLM`, the pre-softmax projection: section 3.4). Post-LN by
    default, as in the
    paper; with `normalize_first=True` each stack ends with a norm. Source
    tokens equal to `padding_id` are masked in the encoder and in
    cross-attention; the decoder is causal (trailing target padding is never
    attended to by real tokens; leave it out of the loss).

    Sublayers, by attribute and layer name: `token_embedding` (shared),
    `encoder_position_embedding` and `decoder_position_embedding` (absent
    with rotary positions), `encoder_embeddings_dropout`,
    `decoder_embeddings_dropout`, `encoder_transformer_layers[i]` named
    `encoder_transformer_layer_{i}` (TransformerEncoderBlock),
    `decoder_transformer_layers[i]` named `decoder_transformer_layer_{i}`
    (DecoderBlock with cross-attention), `encoder_final_norm` and
    `decoder_final_norm` (only when `normalize_first`),
    `encoder_final_dropout` and `decoder_final_dropout` (only with
    `final_dropout`).

    Args:
        vocabulary_size: the shared source/target vocabulary size.
        num_encoder_layers, num_decoder_layers: depth of each stack.
        num_heads: attention heads per block.
        hidden_dim: width of the model (d_model).
        intermediate_dim: inner width of the feed-forward networks.
        max_sequence_length: the longest source, and the longest target
            (start token plus new tokens).
        head_dim: size of each head; by default `hidden_dim // num_heads`.
        num_key_value_heads: fewer key/value heads for grouped-query
            attention, in self- and cross-attention alike.
        activation: "relu" (default), "gelu", "gelu_approximate"
            or "swiglu".
        dropout: dropout of the embeddings, attention and sublayers.
        normalize_first: pre-LN if True, post-LN (the paper) if False.
        normalization: "layer_norm" or "rms_norm".
        layer_norm_epsilon: epsilon of the normalization layers.
        position_encoding: "sinusoidal" (default), "sinusoidal_split"
            (sines and cosines in two halves, as Marian), "learned",
            "rotary" (rotary in self-attention only; cross-attention has no
            positions) or "relative" (T5's bucketed relative position bias
            on the self-attention logits, one table per stack, computed once
            and shared by its layers: sublayers
            `encoder_relative_position_bias` and
            `decoder_relative_position_bias`).
        rotary_max_wavelength: the RoPE base with rotary positions.
        use_bias: whether the attention and feed-forward projections have
            biases.
        scale_embeddings: multiply the token embeddings by sqrt(hidden_dim)
            (default, the paper) before positions are added.
        padding_id: the id of padding tokens, or None if no id is padding.
        scale_attention: scale the attention logits by 1 / sqrt(head_dim)
            (default); False for T5, which folds it into its weights.
        relative_attention_num_buckets: the buckets of "relative" positions.
        relative_attention_max_distance: where their last bucket starts.
        inner_dropout: dropout inside every feed-forward network, after its
            activation (T5's; 0 by default: none).
        final_dropout: dropout of each stack's output, after its final
            norm (T5's; 0 by default: none). Both are in training only.

    Call arguments:
        inputs: a dict with int "source_ids" (batch, src_seq) and
            "target_ids" (batch, tgt_seq), the decoder inputs (teacher
            forcing: the targets shifted right, see `teacher_forcing`).
        training: whether dropout is active.
        return_attention_scores: also return every block's attention
            weights.

    Returns:
        The decoder's hidden states (batch, tgt_seq, hidden_dim); always
        `(hidden, scores)` with `return_attention_scores=True`, where `scores` is a
        dict of tuples with one float32 tensor per layer:
        "encoder_self_attention" (batch, num_heads, src_seq, src_seq),
        "decoder_self_attention" (batch, num_heads, tgt_seq, tgt_seq) and
        "cross_attention" (batch, num_heads, tgt_seq, src_seq), zero on
        source padding and future target keys.

    Example:
    >>> backbone = keras_tfm.models.Seq2SeqBackbone(
    ...     vocabulary_size=20, num_encoder_layers=1, num_decoder_layers=1,
    ...     num_heads=2, hidden_dim=16, intermediate_dim=32,
    ...     max_sequence_length=16)
    >>> backbone({"source_ids": np.array([[3, 4, 5]]),
    ...           "target_ids": np.array([[1, 6]])}).shape
    TensorShape([1, 2, 16])
    """

    own_arguments = {
        "num_encoder_layers": check_positive_int,
        "num_decoder_layers": check_positive_int,
        "scale_embeddings": as_bool,
        "position_encoding": one_of((*POSITION_ENCODINGS, RELATIVE)),
        "scale_attention": as_bool,
        "relative_attention_num_buckets": check_positive_int,
        "relative_attention_max_distance": check_positive_int,
        "inner_dropout": check_rate,
        "final_dropout": check_rate,
    }

    def __init__(
        self,
        vocabulary_size,
        num_encoder_layers,
        num_decoder_layers,
        num_heads,
        hidden_dim,
        intermediate_dim,
        max_sequence_length,
        head_dim=None,
        num_key_value_heads=None,
        activation="relu",
        dropout=0.0,
        normalize_first=False,
        normalization="layer_norm",
        layer_norm_epsilon=1e-5,
        position_encoding="sinusoidal",
        rotary_max_wavelength=10000,
        use_bias=True,
        scale_embeddings=True,
        padding_id=0,
        scale_attention=True,
        relative_attention_num_buckets=32,
        relative_attention_max_distance=128,
        inner_dropout=0.0,
        final_dropout=0.0,
        **kwargs,
    ):
        super().__init__(**kwargs)
        # Each argument above, checked, under its own name.
        self._store_arguments(locals())

        # All weights exist from construction: saving needs no build config.
        hidden_shape = (None, None, self.hidden_dim)
        self.token_embedding = TokenEmbedding(
            self.vocabulary_size,
            self.hidden_dim,
            scale_embeddings=self.scale_embeddings,
            dtype=self.dtype_policy,
            name="token_embedding",
        )
        self.token_embedding.build((None, None))
        self.encoder_position_embedding = self._make_position_embedding(
            "encoder_position_embedding"
        )
        self.decoder_position_embedding = self._make_position_embedding(
            "decoder_position_embedding"
        )
        self.encoder_embeddings_dropout = self._make_dropout(
            "encoder_embeddings_dropout"
        )
        self.decoder_embeddings_dropout = self._make_dropout(
            "decoder_embeddings_dropout"
        )
        self.encoder_relative_position_bias = self._make_relative_bias(True)
        self.decoder_relative_position_bias = self._make_relative_bias(False)
        self.encoder_transformer_layers = []
        for i in range(self.num_encoder_layers):
            block = TransformerEncoderBlock(
                **self._block_options(),
                name=f"encoder_transformer_layer_{i}",
            )
            block.build(hidden_shape)
            self.encoder_transformer_layers.append(block)
        self.decoder_transformer_layers = []
        for i in range(self.num_decoder_layers):
            block = DecoderBlock(
                **self._block_options(),
                name=f"decoder_transformer_layer_{i}",
            )
            block.build(hidden_shape, hidden_shape)
            self.decoder_transformer_layers.append(block)
        self.encoder_final_norm = self.decoder_final_norm = None
        if self.normalize_first:
            self.encoder_final_norm = self._make_norm("encoder_final_norm")
            self.decoder_final_norm = self._make_norm("decoder_final_norm")
        self.encoder_final_dropout = self._make_final_dropout("encoder_final_dropout")
        self.decoder_final_dropout = self._make_final_dropout("decoder_final_dropout")
        self.built = True

    def _block_options(self):
        return self._block_arguments(
            scale_attention=self.scale_attention, inner_dropout=self.inner_dropout
        )

    def _make_final_dropout(self, name):
        """A stack's output dropout (`final_dropout`), or None without one."""
        if not self.final_dropout:
            return None
        layer = keras.layers.Dropout(
            self.final_dropout, dtype=self.dtype_policy, name=name
        )
        layer.build((None, None, self.hidden_dim))
        return layer

    def _finish(self, x, norm, dropout, training=None):
        """A stack's output: `norm` (pre-LN) then `dropout` (`final_dropout`)."""
        if norm is not None:
            x = norm(x)
        if dropout is not None:
            x = dropout(x, training=training)
        return x

    def _make_position_embedding(self, name="position_embedding", **kwargs):
        if self.position_encoding == RELATIVE:
            return None
        return super()._make_position_embedding(name, **kwargs)

    def _make_relative_bias(self, bidirectional):
        """The stack's `RelativePositionBias`, or None without "relative"."""
        if self.position_encoding != RELATIVE:
            return None
        stack = "encoder" if bidirectional else "decoder"
        layer = RelativePositionBias(
            self.num_heads,
            self.relative_attention_num_buckets,
            self.relative_attention_max_distance,
            bidirectional=bidirectional,
            dtype=self.dtype_policy,
            name=f"{stack}_relative_position_bias",
        )
        layer.build()
        return layer

    def _relative_bias(self, layer, query_length, key_length, query_start=0):
        """`layer`'s bias (see `RelativePositionBias`), or None without one."""
        if layer is None:
            return None
        return layer(
            query_length=query_length, key_length=key_length, query_start=query_start
        )

    def encode(
        self,
        source_ids,
        encoder_padding_mask=None,
        training=None,
        return_attention_scores=False,
    ):
        """The encoder output (batch, src_seq, hidden_dim) of `source_ids`.

        `encoder_padding_mask` (batch, src_seq), 1 for real tokens, defaults
        to `source_ids != padding_id`. With `return_attention_scores=True`,
        `(outputs, scores)`, scores a tuple of one (batch, num_heads,
        src_seq, src_seq) tensor per encoder layer.
        """
        check_token_ids("source_ids", source_ids, self.max_sequence_length)
        if encoder_padding_mask is None:
            encoder_padding_mask = self.padding_mask_of(source_ids)
        x = self._embed(
            source_ids,
            self.encoder_position_embedding,
            self.encoder_embeddings_dropout,
            training=training,
        )
        length = ops.shape(source_ids)[1]
        bias = self._relative_bias(self.encoder_relative_position_bias, length, length)
        scores = []
        for block in self.encoder_transformer_layers:
            x = block(
                x,
                padding_mask=encoder_padding_mask,
                return_attention_scores=return_attention_scores,
                training=training,
                attention_bias=bias,
            )
            if return_attention_scores:
                x, layer_scores = x
                scores.append(layer_scores)
        x = self._finish(
            x, self.encoder_final_norm, self.encoder_final_dropout, training
        )
        return (x, tuple(scores)) if return_attention_scores else x

    def embed_target(self, target_ids, start_index=0, training=None):
        """Target token plus position embeddings, dropped out."""
        return self._embed(
            target_ids,
            self.decoder_position_embedding,
            self.decoder_embeddings_dropout,
            start_index,
            training=training,
        )

    def _final(self, x, training=None):
        return self._finish(
            x, self.decoder_final_norm, self.decoder_final_dropout, training
        )

    def call(self, inputs, training=None, return_attention_scores=False):
        if not isinstance(inputs, dict) or set(inputs) != {"source_ids", "target_ids"}:
            raise ValueError(
                "A sequence-to-sequence model expects a dict with keys "
                f'"source_ids" and "target_ids". Received: inputs={inputs!r}'
            )
        source_ids, target_ids = inputs["source_ids"], inputs["target_ids"]
        check_token_ids("target_ids", target_ids, self.max_sequence_length)
        encoder_padding_mask = self.padding_mask_of(source_ids)
        encoder_outputs = self.encode(
            source_ids,
            encoder_padding_mask,
            training=training,
            return_attention_scores=return_attention_scores,
        )
        if return_attention_scores:
            encoder_outputs, encoder_scores = encoder_outputs
        x = self.embed_target(target_ids, training=training)
        length = ops.shape(target_ids)[1]
        bias = self._relative_bias(self.decoder_relative_position_bias, length, length)
        self_scores, cross_scores = [], []
        for block in self.decoder_transformer_layers:
            x = block(
                x,
                encoder_outputs=encoder_outputs,
                encoder_padding_mask=encoder_padding_mask,
                return_attention_scores=return_attention_scores,
                training=training,
                attention_bias=bias,
            )
            if return_attention_scores:
                x, layer_scores = x
                self_scores.append(layer_scores["self_attention"])
                cross_scores.append(layer_scores["cross_attention"])
        x = self._final(x, training)
        if not return_attention_scores:
            return x
        return x, {
            "encoder_self_attention": encoder_scores,
            "decoder_self_attention": tuple(self_scores),
            "cross_attention": tuple(cross_scores),
        }

    def compute_cross_attention_cache(self, encoder_outputs):
        """Every decoder block's cross-attention keys and values, computed once.

        Returns a tuple with one (batch, 2, src_seq, heads, head_dim) per block.
        """
        return tuple(
            block.compute_cross_attention_cache(encoder_outputs)
            for block in self.decoder_transformer_layers
        )

    def empty_cache(self, batch_size, max_length):
        """One zero self-attention cache (batch, 2, length, heads, dim) per block."""
        return tuple(
            block.empty_cache(batch_size, max_length)
            for block in self.decoder_transformer_layers
        )

    def call_with_cache(
        self,
        target_ids,
        caches,
        cache_update_index,
        cross_attention_caches,
        encoder_padding_mask=None,
    ):
        """Decoder step(s) with the self-attention and cross-attention caches.

        Args:
            target_ids: int (batch, seq), the decoder inputs at positions
                `cache_update_index ... cache_update_index + seq - 1`.
            caches: one self-attention cache per block, see `empty_cache`.
            cache_update_index: int or scalar tensor.
            cross_attention_caches: from `compute_cross_attention_cache`.
            encoder_padding_mask: (batch, src_seq), False at source padding.

        Returns:
            `(hidden, caches)`: (batch, seq, hidden_dim) after the final norm,
            and the updated self-attention caches.
        """
        check_token_ids("target_ids", target_ids, self.max_sequence_length)
        x = self.embed_target(target_ids, start_index=cache_update_index)
        bias = None
        if self.decoder_relative_position_bias is not None and caches:
            bias = self._relative_bias(
                self.decoder_relative_position_bias,
                ops.shape(target_ids)[1],
                ops.shape(kv_cache.values_of(caches[0]))[2],
                cache_update_index,
            )
        updated = []
        for block, cache, cross_cache in zip(
            self.decoder_transformer_layers, caches, cross_attention_caches, strict=True
        ):
            x, cache = block(
                x,
                encoder_padding_mask=encoder_padding_mask,
                cache=AttentionCache(cache, cache_update_index),
                cross_attention_cache=cross_cache,
                attention_bias=bias,
            )
            updated.append(cache)
        return self._final(x), tuple(updated)

import keras

from keras_tfm.kernels.masks import implicit_mask
from keras_tfm.layers.attention_cache import AttentionCache
from keras_tfm.layers.transformer_block import TransformerBlock
from keras_tfm.validation import check_rank


@keras.saving.register_keras_serializable(package="keras_tfm")
class DecoderBlock(TransformerBlock):
    """One decoder layer: causal self-attention, cross-attention, FFN.

    Post-LN, as in the paper (`normalize_first=False`):

        x = Norm(x + Dropout(CausalSelfAttention(x)))
        x = Norm(x + Dropout(CrossAttention(x, encoder_outputs)))
        y = Norm(x + Dropout(FFN(x)))

    The cross-attention sublayer exists when the block is built with an
    encoder output (encoder-decoder models); without one it is a
    decoder-only (GPT-style) block. Pre-LN with `normalize_first=True`.

    Cached decoding: `cache` is an `AttentionCache(cache, update_index)`: the
    self-attention keys and values of earlier steps (batch, 2, max_length,
    kv_heads, head_dim) (see `empty_cache`) and the position of the first
    token of `inputs`. The cross-attention keys and values are computed once
    per source with `compute_cross_attention_cache(encoder_outputs)` and
    passed as `cross_attention_cache` at every step instead of
    `encoder_outputs`.

    Args:
        Those of `TransformerEncoderBlock`.

    Call arguments:
        inputs: (batch, seq, hidden_dim).
        encoder_outputs: optional (batch, src_seq, encoder_dim).
        padding_mask: optional (batch, seq) mask of `inputs`' real tokens (with
            a cache: (batch, max_length), over the cache's positions).
        encoder_padding_mask: optional (batch, src_seq) mask of the source.
        use_causal_mask: True by default.
        cache: optional `AttentionCache` of the self-attention, with its
            `update_index`: where `inputs` are written.
        cross_attention_cache: optional precomputed cross-attention keys and
            values, in place of `encoder_outputs`.
        return_attention_scores: also return the attention weights; not
            with a cache.
        attention_bias: optional float (batch or 1, num_heads, seq, k_len)
            added to the self-attention logits (T5's relative position
            bias; with a cache k_len is the cache's length); the
            cross-attention has none.
        training: whether dropout is active.

    Returns:
        `outputs` (batch, seq, hidden_dim); always `(outputs, cache)` when
        `cache` is passed, the cache's storage updated; always
        `(outputs, scores)` with `return_attention_scores=True`, `scores` a
        dict with "self_attention" (batch, num_heads, seq, seq) and, in a
        block with cross-attention, "cross_attention" (batch, num_heads, seq,
        src_seq), float32 weights.

    Example:
    >>> block = keras_tfm.layers.DecoderBlock(num_heads=2, intermediate_dim=32)
    >>> x, source = np.ones((2, 5, 8), "float32"), np.ones((2, 7, 8), "float32")
    >>> block(x, encoder_outputs=source).shape
    TensorShape([2, 5, 8])
    """

    def build(self, inputs_shape, encoder_outputs_shape=None):
        self._build_self_attention(inputs_shape)
        self.has_cross_attention = encoder_outputs_shape is not None
        if self.has_cross_attention:
            self.cross_attention = self._make_attention("cross_attention", False)
            self.cross_attention.build(inputs_shape, encoder_outputs_shape)
            self.cross_attention_norm = self._make_norm("cross_attention_norm")
            self.cross_attention_norm.build(inputs_shape)
            self.cross_attention_dropout = self._make_dropout("cross_attention_dropout")
        self._build_feed_forward(inputs_shape)

    def empty_cache(self, batch_size, max_length, dtype=None):
        """A zero self-attention cache for `max_length` positions."""
        return self.self_attention.empty_cache(batch_size, max_length, dtype)

    def compute_cross_attention_cache(self, encoder_outputs):
        """The cross-attention keys and values of `encoder_outputs`, computed once."""
        self._require_cross_attention()
        return self.cross_attention.compute_key_value_cache(encoder_outputs)

    def _require_cross_attention(self):
        if not self.has_cross_attention:
            raise ValueError(
                f"DecoderBlock '{self.name}' was built without cross-attention "
                "(its first call had no `encoder_outputs`), so it cannot attend "
                "to an encoder output."
            )

    def call(
        self,
        inputs,
        encoder_outputs=None,
        padding_mask=None,
        encoder_padding_mask=None,
        use_causal_mask=True,
        cache=None,
        cross_attention_cache=None,
        return_attention_scores=False,
        training=None,
        attention_bias=None,
    ):
        check_rank("inputs", inputs, 3, "(batch, seq, hidden_dim)")
        scores = {}
        if cache is not None and getattr(cache, "update_index", None) is None:
            raise ValueError(
                "`cache` must be an `AttentionCache(cache, update_index)` with "
                "an `update_index`: the position of the first token of `inputs` "
                f"in the cache. Received: cache of type {type(cache).__name__}"
            )
        if cache is not None and return_attention_scores:
            raise ValueError(
                "`return_attention_scores=True` is not supported with a `cache`: "
                "a call returns `(outputs, cache)` or `(outputs, scores)`, never "
                "both. Run the full (uncached) pass to inspect the weights."
            )
        attends_to_source = (
            encoder_outputs is not None or cross_attention_cache is not None
        )
        if attends_to_source:
            self._require_cross_attention()
        elif self.has_cross_attention:
            raise ValueError(
                f"DecoderBlock '{self.name}' has cross-attention: pass "
                "`encoder_outputs` or `cross_attention_cache`."
            )
        if padding_mask is None and cache is None:
            padding_mask = implicit_mask(inputs)
        if encoder_padding_mask is None and encoder_outputs is not None:
            encoder_padding_mask = implicit_mask(encoder_outputs)
        x = inputs

        # Causal self-attention block.
        masks = {"padding_mask": padding_mask, "use_causal_mask": use_causal_mask,
                 "attention_bias": attention_bias}  # fmt: skip
        x, extra = self._self_attention_block(
            x, masks, training, cache=cache, scores=return_attention_scores
        )
        if cache is not None:
            cache = extra
        elif return_attention_scores:
            scores["self_attention"] = extra

        # Cross-attention block.
        if attends_to_source:
            residual = x
            x = self._pre(x, self.cross_attention_norm)
            source = {
                "context": encoder_outputs,
                "context_padding_mask": encoder_padding_mask,
            }
            if cross_attention_cache is not None:
                x, _ = self.cross_attention(  # the read-only cache, unchanged
                    x, cache=AttentionCache(cross_attention_cache),
                    training=training, **source,
                )  # fmt: skip
            elif return_attention_scores:
                x, scores["cross_attention"] = self.cross_attention.call_with_scores(
                    x, training=training, **source
                )
            else:
                x = self.cross_attention(x, training=training, **source)
            x = self._post(
                x, residual, self.cross_attention_norm,
                self.cross_attention_dropout, training,
            )  # fmt: skip

        # Feed-forward block.
        x = self._feed_forward_block(x, training)
        if cache is not None:
            return x, cache
        return (x, scores) if return_attention_scores else x

import keras
import numpy as np
from keras import ops

from keras_tfm.generation import generation_utils as gen
from keras_tfm.layers.decoder_block import DecoderBlock
from keras_tfm.layers.token_embedding import TokenEmbedding
from keras_tfm.layers.transformer_encoder_block import TransformerEncoderBlock
from keras_tfm.models._common import TransformerModel, check_token_ids
from keras_tfm.models.tokenizer_attachment import (
    restore_tokenizer,
    serialize_tokenizer,
    tokenizer_end_id,
    tokenizer_start_id,
)
from keras_tfm.validation import check_positive_int, check_rank


@keras.saving.register_keras_serializable(package="keras_tfm")
class Seq2SeqTransformer(TransformerModel):
    """The encoder-decoder Transformer of "Attention Is All You Need".

        memory = Encoder(E[source] * sqrt(d) + PE)
        h      = Decoder(E[target] * sqrt(d) + PE, memory)   causal + cross
        logits = h E^T  (+ b with `use_logits_bias`)

    One embedding matrix E is shared by the source, the target and the
    pre-softmax projection (section 3.4). Post-LN by default, as in the
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
    `decoder_final_norm` (only when `normalize_first`), `lm_head` (only
    with `tie_word_embeddings=False`) and `logits_bias` (only with
    `use_logits_bias=True`).

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
            (sines and cosines in two halves, as Marian), "learned" or
            "rotary" (rotary in self-attention only; cross-attention has no
            positions).
        rotary_max_wavelength: the RoPE base with rotary positions.
        use_bias: whether the attention and feed-forward projections have
            biases.
        tie_word_embeddings: project to logits with the shared embedding
            (default, the paper) or with a separate `lm_head`.
        scale_embeddings: multiply the token embeddings by sqrt(hidden_dim)
            (default, the paper) before positions are added.
        use_logits_bias: add a learned bias per vocabulary entry to the
            logits (sublayer `logits_bias`; Marian's `final_logits_bias`).
        padding_id: the id of padding tokens, or None if no id is padding.
        tokenizer: optional keras-hub tokenizer, saved with the model;
            `generate` then also takes and returns strings.

    Call arguments:
        inputs: a dict with int "source_ids" (batch, src_seq) and
            "target_ids" (batch, tgt_seq), the decoder inputs (teacher
            forcing: the targets shifted right, see `teacher_forcing`).
        training: whether dropout is active.
        return_attention_scores: also return every block's attention
            weights.

    Returns:
        float32 logits (batch, tgt_seq, vocabulary_size); always `(logits,
        scores)` with `return_attention_scores=True`, where `scores` is a
        dict of tuples with one float32 tensor per layer:
        "encoder_self_attention" (batch, num_heads, src_seq, src_seq),
        "decoder_self_attention" (batch, num_heads, tgt_seq, tgt_seq) and
        "cross_attention" (batch, num_heads, tgt_seq, src_seq), zero on
        source padding and future target keys.

    Example:
    >>> model = keras_tfm.models.Seq2SeqTransformer(
    ...     vocabulary_size=20, num_encoder_layers=1, num_decoder_layers=1,
    ...     num_heads=2, hidden_dim=16, intermediate_dim=32,
    ...     max_sequence_length=16)
    >>> model({"source_ids": np.array([[3, 4, 5]]),
    ...        "target_ids": np.array([[1, 6]])}).shape
    TensorShape([1, 2, 20])
    >>> len(model.generate([[3, 4, 5]], max_new_tokens=4, start_token_id=1)[0])
    4
    """

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
        tie_word_embeddings=True,
        scale_embeddings=True,
        use_logits_bias=False,
        padding_id=0,
        tokenizer=None,
        **kwargs,
    ):
        super().__init__(
            vocabulary_size=vocabulary_size,
            num_heads=num_heads,
            hidden_dim=hidden_dim,
            intermediate_dim=intermediate_dim,
            max_sequence_length=max_sequence_length,
            head_dim=head_dim,
            num_key_value_heads=num_key_value_heads,
            activation=activation,
            dropout=dropout,
            normalize_first=normalize_first,
            normalization=normalization,
            layer_norm_epsilon=layer_norm_epsilon,
            position_encoding=position_encoding,
            rotary_max_wavelength=rotary_max_wavelength,
            use_bias=use_bias,
            padding_id=padding_id,
            **kwargs,
        )
        self.num_encoder_layers = check_positive_int(
            "num_encoder_layers", num_encoder_layers
        )
        self.num_decoder_layers = check_positive_int(
            "num_decoder_layers", num_decoder_layers
        )
        self.tie_word_embeddings = bool(tie_word_embeddings)
        self.scale_embeddings = bool(scale_embeddings)
        self.use_logits_bias = bool(use_logits_bias)
        self.tokenizer = restore_tokenizer(tokenizer)

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
        self.encoder_transformer_layers = []
        for i in range(self.num_encoder_layers):
            block = TransformerEncoderBlock(
                **self._block_arguments(), name=f"encoder_transformer_layer_{i}"
            )
            block.build(hidden_shape)
            self.encoder_transformer_layers.append(block)
        self.decoder_transformer_layers = []
        for i in range(self.num_decoder_layers):
            block = DecoderBlock(
                **self._block_arguments(), name=f"decoder_transformer_layer_{i}"
            )
            block.build(hidden_shape, hidden_shape)
            self.decoder_transformer_layers.append(block)
        self.encoder_final_norm = self.decoder_final_norm = None
        if self.normalize_first:
            self.encoder_final_norm = self._make_norm("encoder_final_norm")
            self.decoder_final_norm = self._make_norm("decoder_final_norm")
        self.lm_head = self._make_lm_head(self.tie_word_embeddings)
        self.logits_bias = self._make_logits_bias(self.use_logits_bias)
        self.built = True

    @staticmethod
    def teacher_forcing(target_ids, start_token_id):
        """Decoder inputs and labels from target sequences, for `fit`.

        `decoder_inputs` is `target_ids` shifted right by one with
        `start_token_id` in front (the last token dropped); `labels` is
        `target_ids`. Use a loss with `ignore_class=padding_id` so that the
        padding of the labels does not count.

        Example:
        >>> Seq2SeqTransformer.teacher_forcing(np.array([[5, 6, 2, 0]]), 1)
        (array([[1, 5, 6, 2]], dtype=int32), array([[5, 6, 2, 0]], dtype=int32))
        """
        target_ids = np.asarray(target_ids)
        if target_ids.ndim != 2 or not np.issubdtype(target_ids.dtype, np.integer):
            raise ValueError(
                "`target_ids` must be an integer (batch, seq) array. Received: "
                f"target_ids.shape={target_ids.shape}, dtype={target_ids.dtype}"
            )
        start = np.full((len(target_ids), 1), start_token_id, "int32")
        inputs = np.concatenate([start, target_ids[:, :-1]], axis=1).astype("int32")
        return inputs, target_ids.astype("int32")

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
        x = self.token_embedding(source_ids)
        if self.encoder_position_embedding is not None:
            x = self.encoder_position_embedding(x)
        x = self.encoder_embeddings_dropout(x, training=training)
        scores = []
        for block in self.encoder_transformer_layers:
            x = block(
                x,
                padding_mask=encoder_padding_mask,
                return_attention_scores=return_attention_scores,
                training=training,
            )
            if return_attention_scores:
                x, layer_scores = x
                scores.append(layer_scores)
        if self.encoder_final_norm is not None:
            x = self.encoder_final_norm(x)
        return (x, tuple(scores)) if return_attention_scores else x

    def _embed_target(self, target_ids, start_index=0, training=None):
        x = self.token_embedding(target_ids)
        if self.decoder_position_embedding is not None:
            x = self.decoder_position_embedding(x, start_index=start_index)
        return self.decoder_embeddings_dropout(x, training=training)

    def _logits(self, x):
        if self.decoder_final_norm is not None:
            x = self.decoder_final_norm(x)
        if self.lm_head is None:
            logits = self.token_embedding(x, reverse=True)
        else:
            logits = ops.cast(self.lm_head(x), "float32")
        if self.logits_bias is not None:
            logits = self.logits_bias(logits)
        return logits

    def call(self, inputs, training=None, return_attention_scores=False):
        if not isinstance(inputs, dict) or set(inputs) != {"source_ids", "target_ids"}:
            raise ValueError(
                'Seq2SeqTransformer expects a dict with keys "source_ids" and '
                f'"target_ids". Received: inputs={inputs!r}'
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
        x = self._embed_target(target_ids, training=training)
        self_scores, cross_scores = [], []
        for block in self.decoder_transformer_layers:
            x = block(
                x,
                encoder_outputs=encoder_outputs,
                encoder_padding_mask=encoder_padding_mask,
                return_attention_scores=return_attention_scores,
                training=training,
            )
            if return_attention_scores:
                x, layer_scores = x
                self_scores.append(layer_scores["self_attention"])
                cross_scores.append(layer_scores["cross_attention"])
        logits = self._logits(x)
        if not return_attention_scores:
            return logits
        return logits, {
            "encoder_self_attention": encoder_scores,
            "decoder_self_attention": tuple(self_scores),
            "cross_attention": tuple(cross_scores),
        }

    def compute_cross_attention_cache(self, encoder_outputs):
        """Every decoder block's cross-attention keys and values, computed once.

        Returns (batch, num_decoder_layers, 2, src_seq, heads, head_dim).
        """
        caches = [
            block.compute_cross_attention_cache(encoder_outputs)
            for block in self.decoder_transformer_layers
        ]
        return ops.stack(caches, axis=1)

    def empty_cache(self, batch_size, max_length):
        """A zero self-attention cache (batch, layers, 2, max_length, heads, dim)."""
        caches = [
            b.empty_cache(batch_size, max_length)
            for b in self.decoder_transformer_layers
        ]
        return ops.stack(caches, axis=1)

    def call_with_cache(
        self,
        target_ids,
        cache,
        cache_update_index,
        cross_attention_cache,
        encoder_padding_mask=None,
    ):
        """Decoder step(s) with the self-attention and cross-attention caches.

        Args:
            target_ids: int (batch, seq), the decoder inputs at positions
                `cache_update_index ... cache_update_index + seq - 1`.
            cache: self-attention cache, see `empty_cache`.
            cache_update_index: int or scalar tensor.
            cross_attention_cache: from `compute_cross_attention_cache`.
            encoder_padding_mask: (batch, src_seq), False at source padding.

        Returns:
            `(logits, cache)`.
        """
        check_rank("cache", cache, 6, "(batch, layers, 2, max_length, heads, dim)")
        layers = range(len(self.decoder_transformer_layers))
        logits, caches = self._call_with_layer_caches(
            target_ids,
            [cache[:, i] for i in layers],
            cache_update_index,
            [cross_attention_cache[:, i] for i in layers],
            encoder_padding_mask,
        )
        return logits, ops.stack(caches, axis=1)

    def _call_with_layer_caches(
        self,
        target_ids,
        caches,
        cache_update_index,
        cross_attention_caches,
        encoder_padding_mask,
    ):
        """`call_with_cache` on one cache tensor per block (see CausalLM's)."""
        check_token_ids("target_ids", target_ids, self.max_sequence_length)
        x = self._embed_target(target_ids, start_index=cache_update_index)
        updated = []
        for block, cache, cross_cache in zip(
            self.decoder_transformer_layers, caches, cross_attention_caches, strict=True
        ):
            x, cache = block(
                x,
                encoder_padding_mask=encoder_padding_mask,
                cache=cache,
                cache_update_index=cache_update_index,
                cross_attention_cache=cross_cache,
            )
            updated.append(cache)
        return self._logits(x), tuple(updated)

    def _generate_step(self, sampler, stop_token_ids):
        """The compiled loop: encode once, cross keys/values once, then decode."""
        beams = getattr(sampler, "num_beams", 1)

        def step(source_ids, source_mask, prompt, mask):
            encoded = self.encode(source_ids, source_mask)
            cross_caches = [
                block.compute_cross_attention_cache(encoded)
                for block in self.decoder_transformer_layers
            ]
            if beams > 1:  # The sampler repeats its own state, not closures.
                cross_caches = [ops.repeat(c, beams, axis=0) for c in cross_caches]
                source_mask = ops.repeat(source_mask, beams, axis=0)
            batch_size, length = ops.shape(prompt)[0], ops.shape(prompt)[1]
            cache = tuple(
                block.empty_cache(batch_size, length)
                for block in self.decoder_transformer_layers
            )

            def next(prompt, cache, index):
                token = gen.previous_token(prompt, index)
                logits, cache = self._call_with_layer_caches(
                    token, cache, index - 1, cross_caches, source_mask
                )
                return logits[:, 0, :], None, cache

            return sampler(
                next,
                prompt,
                cache=cache,
                index=1,
                mask=mask,
                stop_token_ids=stop_token_ids,
            )

        return gen.compile_loop(step)

    def generate(
        self,
        source_ids,
        max_new_tokens,
        start_token_id=None,
        stop_token_ids=None,
        num_beams=1,
        length_penalty=0.6,
        sampler="greedy",
        seed=None,
    ):
        """Translates each source: greedy decoding, beam search or sampling.

        The source is encoded once and each decoder block's cross-attention
        keys and values are computed once; then one token per step is decoded
        with the self-attention cache, in an XLA-compiled loop kept per
        setting and retraced only for new shapes.

        Args:
            source_ids: a list of token-id lists (any lengths), a dense
                (batch, seq) int array padded with `padding_id`, or with a
                tokenizer attached a string or a list of strings.
            max_new_tokens: the most tokens to generate per source.
            start_token_id: the first decoder input. None: the attached
                tokenizer's start token (`start_token_id`, or "[START]",
                "<s>", "[CLS]" in its vocabulary).
            stop_token_ids: ids that end a hypothesis (kept in the output;
                dropped from strings). None: the attached tokenizer's end
                token ("[END]", "</s>", ...) if it has one; `[]` for none.
            num_beams: beam width; > 1 is beam search.
            length_penalty: alpha of the GNMT length penalty
                ((5 + n) / 6) ** alpha of beam search (0: none).
            sampler: "greedy" (default), "beam", "random", "top_k", "top_p"
                or a `keras_hub.samplers.Sampler`.
            seed: makes random sampling repeatable.

        Returns:
            Per source, the generated tokens (without the start token): a list
            of id lists (one list for one source), or for string sources
            clean strings, without "[START]", "[END]" or "[PAD]" and with
            word pieces and punctuation rejoined by `keras_tfm.data.detokenize`.
        """
        rows, kind = gen.normalize_token_batch(
            "source_ids",
            source_ids,
            self.vocabulary_size,
            self.padding_id,
            self.tokenizer,
        )
        check_positive_int("max_new_tokens", max_new_tokens)
        longest = max(len(row) for row in rows)
        if longest > self.max_sequence_length:
            raise ValueError(
                f"A source is longer than max_sequence_length="
                f"{self.max_sequence_length}. Received: source length {longest}"
            )
        if max_new_tokens + 1 > self.max_sequence_length:
            raise ValueError(
                "The start token plus `max_new_tokens` exceeds max_sequence_length="
                f"{self.max_sequence_length}. Received: max_new_tokens="
                f"{max_new_tokens}"
            )
        if start_token_id is None:
            start_token_id = tokenizer_start_id(self.tokenizer)
            if start_token_id is None:
                raise ValueError(
                    "`start_token_id` is needed: pass it, or attach a tokenizer "
                    'whose vocabulary has "[START]" (or "<s>"). Received: '
                    f"start_token_id=None and tokenizer={self.tokenizer!r}"
                )
        if (
            isinstance(start_token_id, bool)
            or not isinstance(start_token_id, (int, np.integer))
            or not 0 <= start_token_id < self.vocabulary_size
        ):
            raise ValueError(
                f"`start_token_id` must be an id in [0, {self.vocabulary_size}). "
                f"Received: start_token_id={start_token_id!r}"
            )
        if stop_token_ids is None:
            stop_token_ids = tokenizer_end_id(self.tokenizer)
        stop_token_ids = gen.check_stop_token_ids(stop_token_ids, self.vocabulary_size)
        sampler, key = gen.make_sampler(
            sampler, 1.0, None, None, num_beams, length_penalty, self.fill_id, seed
        )
        function, sampler = gen.cached_function(
            self,
            (key, stop_token_ids),
            lambda: (self._generate_step(sampler, stop_token_ids), sampler),
        )
        gen.reset_seed(sampler, seed)
        # Sources are padded to a multiple of 8 (masked, so the result is the
        # same) so that nearby lengths share one compiled loop.
        source_length = min(-(-longest // 8) * 8, self.max_sequence_length)
        # The source mask comes from the row lengths as well as `padding_id`,
        # so that sources of different lengths batch even without one.
        source, source_mask = gen.pad_rows(rows, source_length, self.fill_id)
        if self.padding_id is not None:
            source_mask &= source != self.padding_id
        prompt, mask = gen.pad_rows(
            [[start_token_id]] * len(rows), 1 + max_new_tokens, self.fill_id
        )
        outputs = ops.convert_to_numpy(function(source, source_mask, prompt, mask))
        results = [gen.truncate_at_stop(row[1:], 0, stop_token_ids) for row in outputs]
        return gen.format_outputs(results, kind, self.tokenizer, stop_token_ids)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_encoder_layers": self.num_encoder_layers,
                "num_decoder_layers": self.num_decoder_layers,
                "tie_word_embeddings": self.tie_word_embeddings,
                "scale_embeddings": self.scale_embeddings,
                "use_logits_bias": self.use_logits_bias,
                "tokenizer": serialize_tokenizer(self.tokenizer),
            }
        )
        return config

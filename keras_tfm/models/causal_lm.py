import keras
from keras import ops

from keras_tfm.generation import generation_utils as gen
from keras_tfm.generation import sliding_window
from keras_tfm.generation.conversation import chat
from keras_tfm.layers.decoder_block import DecoderBlock
from keras_tfm.layers.token_embedding import TokenEmbedding
from keras_tfm.models._common import TransformerModel, check_token_ids
from keras_tfm.models.tokenizer_attachment import (
    restore_tokenizer,
    serialize_tokenizer,
    tokenizer_end_id,
)
from keras_tfm.validation import check_positive_int, check_rank


@keras.saving.register_keras_serializable(package="keras_tfm")
class CausalLM(TransformerModel):
    """A GPT-style decoder-only language model, with cached generation.

        h_0 = E[x] + P            (P: learned, sinusoidal, or rotary in attention)
        h_l = DecoderBlock_l(h_{l-1})    causal self-attention, no cross-attention
        logits = Norm(h_L) E^T    (the final norm only when `normalize_first`)

    The output projection is the token embedding, transposed (tied weights),
    or with `tie_word_embeddings=False` a separate bias-free Dense `lm_head`
    (Llama's layout); logits are float32. Tokens equal to `padding_id` are
    never attended to.

    Sublayers, by attribute and layer name (a checkpoint converter maps
    weights by them): `token_embedding`, `position_embedding` (absent with
    rotary positions), `embeddings_dropout`, `transformer_layers[i]` named
    `transformer_layer_{i}` (DecoderBlock without cross-attention),
    `final_norm` (only when `normalize_first`) and `lm_head` (only when
    untied).

    Args:
        vocabulary_size: number of token ids.
        num_layers: number of decoder blocks.
        num_heads: attention heads per block.
        hidden_dim: width of the model.
        intermediate_dim: inner width of the feed-forward networks.
        max_sequence_length: the longest sequence (prompt plus new tokens).
        head_dim: size of each head; by default `hidden_dim // num_heads`.
        num_key_value_heads: fewer key/value heads for grouped-query attention.
        activation: "gelu" (default, exact), "gelu_approximate"
            (tanh, GPT-2's), "relu", "silu" or "swiglu".
        dropout: dropout rate of the embeddings, attention and sublayers.
        normalize_first: pre-LN (default, as GPT-2) or post-LN.
        normalization: "layer_norm" or "rms_norm".
        layer_norm_epsilon: epsilon of the normalization layers.
        position_encoding: "learned" (default), "sinusoidal",
            "sinusoidal_split" (sines and cosines in two halves) or "rotary".
        rotary_max_wavelength: the RoPE base with rotary positions (10000;
            100000 in SmolLM2).
        use_bias: whether the attention and feed-forward projections have
            biases (GPT-2: yes; Llama: no).
        tie_word_embeddings: project to logits with the token embedding
            (default) or with a separate `lm_head`.
        padding_id: the id of padding tokens, or None if no id is padding.
        tokenizer: optional keras-hub tokenizer; saved with the model, and
            `generate` then also takes and returns strings.

    Call arguments:
        token_ids: int (batch, seq).
        training: whether dropout is active.
        return_attention_scores: also return every block's self-attention
            weights.

    Returns:
        float32 logits (batch, seq, vocabulary_size) for the next token;
        always `(logits, scores)` with `return_attention_scores=True`, where
        `scores` is a tuple of `num_layers` float32 tensors (batch,
        num_heads, seq, seq): zero on future and padding keys, each row a
        distribution over the allowed keys.

    Example:
    >>> model = keras_tfm.models.CausalLM(
    ...     vocabulary_size=50, num_layers=1, num_heads=2, hidden_dim=16,
    ...     intermediate_dim=32, max_sequence_length=16)
    >>> model(np.array([[5, 6, 7]])).shape
    TensorShape([1, 3, 50])
    >>> len(model.generate([[5, 6, 7], [8]], max_new_tokens=4)[1])
    5
    """

    def __init__(
        self,
        vocabulary_size,
        num_layers,
        num_heads,
        hidden_dim,
        intermediate_dim,
        max_sequence_length,
        head_dim=None,
        num_key_value_heads=None,
        activation="gelu",
        dropout=0.0,
        normalize_first=True,
        normalization="layer_norm",
        layer_norm_epsilon=1e-5,
        position_encoding="learned",
        rotary_max_wavelength=10000,
        use_bias=True,
        tie_word_embeddings=True,
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
        self.num_layers = check_positive_int("num_layers", num_layers)
        self.tie_word_embeddings = bool(tie_word_embeddings)
        self.tokenizer = restore_tokenizer(tokenizer)

        # All weights exist from construction: saving needs no build config.
        hidden_shape = (None, None, self.hidden_dim)
        self.token_embedding = TokenEmbedding(
            self.vocabulary_size,
            self.hidden_dim,
            dtype=self.dtype_policy,
            name="token_embedding",
        )
        self.token_embedding.build((None, None))
        self.position_embedding = self._make_position_embedding()
        self.embeddings_dropout = self._make_dropout("embeddings_dropout")
        self.transformer_layers = []
        for i in range(self.num_layers):
            block = DecoderBlock(
                **self._block_arguments(), name=f"transformer_layer_{i}"
            )
            block.build(hidden_shape)
            self.transformer_layers.append(block)
        self.final_norm = None
        if self.normalize_first:
            self.final_norm = self._make_norm("final_norm")
        self.lm_head = self._make_lm_head(self.tie_word_embeddings)
        self.built = True

    def _embed(self, token_ids, start_index=0, training=None):
        x = self.token_embedding(token_ids)
        if self.position_embedding is not None:
            x = self.position_embedding(x, start_index=start_index)
        return self.embeddings_dropout(x, training=training)

    def _logits(self, x):
        if self.final_norm is not None:
            x = self.final_norm(x)
        if self.lm_head is None:
            return self.token_embedding(x, reverse=True)
        return ops.cast(self.lm_head(x), "float32")

    def call(self, token_ids, training=None, return_attention_scores=False):
        check_token_ids("token_ids", token_ids, self.max_sequence_length)
        padding_mask = self.padding_mask_of(token_ids)
        x = self._embed(token_ids, training=training)
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
                scores.append(layer_scores["self_attention"])
        logits = self._logits(x)
        return (logits, tuple(scores)) if return_attention_scores else logits

    def empty_cache(self, batch_size, max_length):
        """A zero cache (batch, num_layers, 2, max_length, kv_heads, head_dim)."""
        caches = [
            b.empty_cache(batch_size, max_length) for b in self.transformer_layers
        ]
        return ops.stack(caches, axis=1)

    def call_with_cache(self, token_ids, cache, cache_update_index, padding_mask=None):
        """One decoding step (or a prefill) with the key/value cache.

        Args:
            token_ids: int (batch, seq), the tokens at positions
                `cache_update_index ... cache_update_index + seq - 1`.
            cache: (batch, num_layers, 2, max_length, kv_heads, head_dim),
                see `empty_cache`.
            cache_update_index: int or scalar tensor.
            padding_mask: optional (batch, max_length), False for the cache
                positions holding padding.

        Returns:
            `(logits, cache)`: float32 (batch, seq, vocabulary_size) and the
            updated cache.
        """
        check_rank("cache", cache, 6, "(batch, num_layers, 2, max_length, heads, dim)")
        layer_caches = [cache[:, i] for i in range(len(self.transformer_layers))]
        logits, layer_caches = self._call_with_layer_caches(
            token_ids, layer_caches, cache_update_index, padding_mask
        )
        return logits, ops.stack(layer_caches, axis=1)

    def _call_with_layer_caches(
        self, token_ids, layer_caches, cache_update_index, padding_mask
    ):
        """`call_with_cache` on one cache tensor per block.

        The generation loop carries these separately: stacking them into one
        tensor at every step would copy every layer's cache once per token.
        """
        check_token_ids("token_ids", token_ids, self.max_sequence_length)
        x = self._embed(token_ids, start_index=cache_update_index)
        updated = []
        for block, layer_cache in zip(
            self.transformer_layers, layer_caches, strict=True
        ):
            x, layer_cache = block(
                x,
                padding_mask=padding_mask,
                cache=layer_cache,
                cache_update_index=cache_update_index,
            )
            updated.append(layer_cache)
        return self._logits(x), tuple(updated)

    def _generate_step(self, sampler, stop_token_ids):
        """The compiled loop: prefill the cache, then sample token by token."""

        def step(prompt, mask, start_index, end_index=None, prefill_length=None):
            # `prefill_length` (a Python int, static): the cache is filled by
            # one pass over the first `prefill_length` tokens only (default:
            # the whole buffer). Slots past a row's prompt hold fill tokens'
            # keys until the loop overwrites them, before they are read.
            batch_size, length = ops.shape(prompt)[0], ops.shape(prompt)[1]
            cache = tuple(
                block.empty_cache(batch_size, length)
                for block in self.transformer_layers
            )
            padding_mask = self.padding_mask_of(prompt)
            prefill_length = length if prefill_length is None else prefill_length
            if prefill_length:
                _, cache = self._call_with_layer_caches(
                    prompt[:, :prefill_length], cache, 0, padding_mask
                )

            def next(prompt, cache, index):
                token = gen.previous_token(prompt, index)
                padding_mask = self.padding_mask_of(prompt)
                logits, cache = self._call_with_layer_caches(
                    token, cache, index - 1, padding_mask
                )
                return logits[:, 0, :], None, cache

            return gen.run_sampler(
                sampler,
                next,
                prompt,
                cache,
                start_index,
                mask,
                stop_token_ids,
                end=end_index,
            )

        return gen.compile_loop(step)

    def _stream_functions(self, sampler):
        """Compiled prefill and single sampling step for host-side decoding."""

        def prefill(tokens):
            batch_size, length = ops.shape(tokens)[0], ops.shape(tokens)[1]
            cache = tuple(
                block.empty_cache(batch_size, length)
                for block in self.transformer_layers
            )
            padding_mask = self.padding_mask_of(tokens)
            _, cache = self._call_with_layer_caches(tokens, cache, 0, padding_mask)
            return cache

        def step(tokens, cache, index):
            token = gen.previous_token(tokens, index)
            logits, cache = self._call_with_layer_caches(
                token, cache, index - 1, self.padding_mask_of(tokens)
            )
            probabilities = sampler.compute_probabilities(logits[:, 0, :])
            return sampler.get_next_token(probabilities), cache

        return gen.compile_loop(prefill), gen.compile_loop(step)

    def generate(
        self,
        prompts,
        max_new_tokens,
        sampler="greedy",
        temperature=1.0,
        top_k=None,
        top_p=None,
        num_beams=1,
        stop_token_ids=None,
        seed=None,
        length_penalty=0.0,
        stream=False,
        window_shift=None,
    ):
        """Continues each prompt by up to `max_new_tokens` tokens.

        The prompts are right-padded into one batch; the cache is filled by one
        forward pass, then one token per step is decoded by an XLA-compiled
        loop (keras-hub samplers, or `BeamSearchSampler` for "beam"), kept per
        sampler setting and retraced only for a new (batch, length), the
        length rounded up to a multiple of 8. Each row
        is decoded exactly as if it were alone.

        Past the context window: with rotary or sinusoidal positions, a
        prompt plus `max_new_tokens` may exceed `max_sequence_length` (L).
        When the window is full it slides by `window_shift` tokens: the last
        L - window_shift tokens are kept, the cache is re-filled from them
        (positions restart at 0) and decoding goes on, so each token is the
        uncached forward pass's prediction from the last L - window_shift to
        L - 1 tokens (see `keras_tfm.generation.sliding_window`). With
        learned positions the error says how many new tokens still fit.

        Streaming (`stream=True`): the tokens are decoded one XLA-compiled
        step at a time on the host and `generate` returns a generator of the
        new pieces as they come (the compiled whole loop is faster when
        nothing needs to be shown on the way).

        Args:
            prompts: a list of token-id lists (any lengths), one list, a
                dense (batch, seq) int array padded with `padding_id`, or with
                a tokenizer attached a string or a list of strings.
            max_new_tokens: how many tokens to add at most.
            sampler: "greedy", "random", "top_k", "top_p", "beam", or a
                `keras_hub.samplers.Sampler`.
            temperature: divides the logits before the softmax.
            top_k, top_p: the cut-offs of "top_k" / "top_p" sampling.
            num_beams: the beam width of "beam" (beam search if > 1).
            stop_token_ids: ids that end a row's generation (kept in the
                output; dropped from strings). None: the attached tokenizer's
                end token (`end_token_id`, or "[END]", "</s>",
                "<|endoftext|>", "<|im_end|>" in its vocabulary) when it has
                one; `[]` for none.
            seed: makes random sampling repeatable.
            length_penalty: the GNMT length-penalty exponent of beam search.
            stream: return a generator of new pieces instead of the outputs;
                not with beam search.
            window_shift: how far the window slides when it is full (rotary
                and sinusoidal positions only); default
                `max_sequence_length // 4`, which re-fills the cache once per
                L // 4 new tokens while keeping at least 3/4 of the window as
                context; 1 re-fills at every step, as nanoGPT crops.

        Returns:
            Per prompt, the prompt followed by the new tokens: a list of lists
            of ids (one list for one prompt), or strings for string prompts
            (detokenized by `keras_tfm.data.detokenize`, without the stop
            token).
            With `stream=True`, a generator yielding at each step the new
            piece (a token id; with string prompts the new text), or for a
            list of prompts a list with one piece per prompt ("" or None
            where nothing is new); for string prompts the prompt followed by
            the joined pieces is the non-streamed output.
        """
        rows, kind = gen.normalize_token_batch(
            "prompts", prompts, self.vocabulary_size, self.padding_id, self.tokenizer
        )
        check_positive_int("max_new_tokens", max_new_tokens)
        if stop_token_ids is None:
            stop_token_ids = tokenizer_end_id(self.tokenizer)
        stop_token_ids = gen.check_stop_token_ids(stop_token_ids, self.vocabulary_size)
        longest = max(len(row) for row in rows)
        slides = sliding_window.check_room(
            self.position_encoding, self.max_sequence_length, longest, max_new_tokens
        )
        window_shift = sliding_window.check_window_shift(
            window_shift, self.max_sequence_length
        )
        sampler, key = gen.make_sampler(
            sampler, temperature, top_k, top_p, num_beams, length_penalty,
            self.fill_id, seed,
        )  # fmt: skip
        if key[0] == "beam" and (stream or slides):
            raise ValueError(
                "Beam search runs as one compiled loop: it cannot stream or "
                "slide the window. Received: "
                f"stream={stream}, prompt length {longest} + max_new_tokens="
                f"{max_new_tokens} vs max_sequence_length={self.max_sequence_length}"
            )
        if stream:
            return self._stream(
                rows,
                kind,
                max_new_tokens,
                sampler,
                key,
                seed,
                stop_token_ids,
                slides,
                window_shift,
            )
        function, sampler = gen.cached_function(
            self,
            (key, stop_token_ids),
            lambda: (self._generate_step(sampler, stop_token_ids), sampler),
        )
        gen.reset_seed(sampler, seed)
        if slides:
            results = sliding_window.generate_sliding(
                function,
                rows,
                max_new_tokens,
                self.max_sequence_length,
                window_shift,
                self.fill_id,
                stop_token_ids,
            )
            return gen.format_outputs(results, kind, self.tokenizer, stop_token_ids)
        # The buffer is rounded up to a multiple of 8 so that nearby lengths
        # share one compiled loop; the extra positions are cut off below.
        length = min(
            gen.bucket_length(longest + max_new_tokens), self.max_sequence_length
        )
        tokens, mask = gen.pad_rows(rows, length, self.fill_id)
        start_index = min(len(row) for row in rows)
        # The loop re-reads token start_index - 1; the prefill covers the
        # prompts (rounded up, so nearby lengths share the compiled loop).
        prefill_length = min(gen.bucket_length(start_index), length)
        outputs = ops.convert_to_numpy(
            function(
                tokens,
                mask,
                ops.convert_to_tensor(start_index, "int32"),
                ops.convert_to_tensor(longest + max_new_tokens, "int32"),
                prefill_length,
            )
        )
        results = [
            gen.truncate_at_stop(
                outputs[i, : len(row) + max_new_tokens], len(row), stop_token_ids
            )
            for i, row in enumerate(rows)
        ]
        return gen.format_outputs(results, kind, self.tokenizer, stop_token_ids)

    def _stream(
        self,
        rows,
        kind,
        max_new_tokens,
        sampler,
        key,
        seed,
        stop_token_ids,
        slides,
        window_shift,
    ):
        """`generate(stream=True)`: the generator of new pieces."""
        (prefill, step), sampler = gen.cached_function(
            self,
            ("stream", key),
            lambda: (self._stream_functions(sampler), sampler),
        )
        gen.reset_seed(sampler, seed)
        longest = max(len(row) for row in rows)
        length = self.max_sequence_length
        if not slides:
            length = min(-(-(longest + max_new_tokens) // 8) * 8, length)
        steps = sliding_window.stream_tokens(
            prefill,
            step,
            rows,
            max_new_tokens,
            length,
            window_shift if slides else None,
            self.fill_id,
            stop_token_ids,
        )
        return sliding_window.stream_pieces(
            steps,
            rows,
            kind,
            lambda ids: gen.format_outputs(
                [ids], "string", self.tokenizer, stop_token_ids
            ),
        )

    def chat(self, messages, max_new_tokens=256, **generate_kwargs):
        """The answer to a message or conversation: `keras_tfm.generation.chat`."""
        return chat(self, messages, max_new_tokens, **generate_kwargs)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_layers": self.num_layers,
                "tie_word_embeddings": self.tie_word_embeddings,
                "tokenizer": serialize_tokenizer(self.tokenizer),
            }
        )
        return config

import keras
from keras import ops

from keras_tfm.generation import generation_utils as gen
from keras_tfm.generation import sliding_window
from keras_tfm.generation.chat_pieces import answer_pieces
from keras_tfm.generation.compiled_loops import CompiledLoops
from keras_tfm.models._common import make_lm_head
from keras_tfm.models.causal_lm_preprocessor import CausalLMPreprocessor
from keras_tfm.models.decoder_backbone import DecoderBackbone
from keras_tfm.models.legacy_configs import (
    constructor_arguments,
    split_legacy_config,
)
from keras_tfm.models.quantization import QuantizationMixin
from keras_tfm.models.task import Task, restore_preprocessor
from keras_tfm.validation import check_positive_int, check_rank


@keras.saving.register_keras_serializable(package="keras_tfm")
class CausalLM(QuantizationMixin, Task):
    """A decoder-only language model, and the generation of both generating families.

        h      = DecoderBackbone(x)
        logits = h E^T            (tied: the token embedding, transposed)
               | h W_lm           (untied: a bias-free Dense `lm_head`)

    The logits are float32. `generate` is written once, here, for both
    generating families: `Seq2SeqLM` (encoder-decoder) derives from this
    class and supplies only its encoder context and its cached decoder step.

    The generation contract: each input's output is the decoder prompt
    followed by the new tokens, up to and including the first stop id (ids)
    or without it (strings). A causal LM's decoder prompt is the prompt; a
    sequence-to-sequence model's is its start token, which is not returned.

    Args:
        backbone: a `DecoderBackbone`.
        preprocessor: optional `CausalLMPreprocessor`; with it `generate`
            and `chat` take and return strings, and `fit` takes strings.
        tie_word_embeddings: project to logits with the backbone's token
            embedding (default) or with a separate `lm_head` (Llama's layout).

    Call arguments:
        token_ids: int (batch, seq).
        training: whether dropout is active.
        return_attention_scores: also return every block's self-attention
            weights (see `DecoderBackbone`).

    Returns:
        float32 logits (batch, seq, vocabulary_size) for the next token;
        `(logits, scores)` with `return_attention_scores=True`.

    Example:
    >>> backbone = keras_tfm.models.DecoderBackbone(
    ...     vocabulary_size=50, num_layers=1, num_heads=2, hidden_dim=16,
    ...     intermediate_dim=32, max_sequence_length=16)
    >>> model = keras_tfm.models.CausalLM(backbone)
    >>> model(np.array([[5, 6, 7]])).shape
    TensorShape([1, 3, 50])
    >>> len(model.generate([[5, 6, 7], [8]], max_new_tokens=4)[1])
    5
    """

    backbone_class = DecoderBackbone
    preprocessor_class = CausalLMPreprocessor
    label_kind = "token"

    def __init__(self, backbone, preprocessor=None, tie_word_embeddings=True, **kwargs):
        if not isinstance(backbone, self.backbone_class):
            raise ValueError(
                f"`backbone` must be a {self.backbone_class.__name__}. "
                f"Received: backbone={backbone!r}"
            )
        kwargs.setdefault("dtype", backbone.dtype_policy)
        super().__init__(**kwargs)
        self.backbone = backbone
        self.preprocessor = restore_preprocessor(preprocessor)
        self.tie_word_embeddings = bool(tie_word_embeddings)
        self.lm_head = None
        if not self.tie_word_embeddings:
            self.lm_head = make_lm_head(backbone)
        # Untracked: the samplers' seed variables are not the model's weights.
        object.__setattr__(self, "compiled_loops", CompiledLoops())
        self.built = True

    def __getattr__(self, name):
        # The backbone's configuration reads through the task
        # (`llm.max_sequence_length`, `llm.num_layers`): only its constructor
        # arguments, nothing else of it.
        if not name.startswith("_") and name != "backbone":
            backbone = self.__dict__.get("backbone")
            if backbone is not None and name in constructor_arguments(type(backbone)):
                return getattr(backbone, name)
        raise AttributeError(
            f"{type(self).__name__!r} object has no attribute {name!r}"
        )

    # === The family's parts: the head, and the cached step of generation ===

    def label_range(self):
        return self.backbone.vocabulary_size

    def logits(self, hidden):
        """float32 logits (batch, seq, vocabulary_size) of the hidden states."""
        if self.lm_head is None:
            return self.backbone.token_embedding(hidden, reverse=True)
        return ops.cast(self.lm_head(hidden), "float32")

    def call(self, token_ids, training=None, return_attention_scores=False):
        outputs = self.backbone(
            token_ids,
            training=training,
            return_attention_scores=return_attention_scores,
        )
        if return_attention_scores:
            hidden, scores = outputs
            return self.logits(hidden), scores
        return self.logits(outputs)

    def empty_cache(self, batch_size, max_length):
        """A zero cache (batch, num_layers, 2, max_length, kv_heads, head_dim)."""
        return ops.stack(self.backbone.empty_cache(batch_size, max_length), axis=1)

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
        caches = tuple(cache[:, i] for i in range(self.backbone.num_layers))
        hidden, caches = self.backbone.call_with_cache(
            token_ids, caches, cache_update_index, padding_mask
        )
        return self.logits(hidden), ops.stack(caches, axis=1)

    def encoder_context(self, encoder_inputs):
        """What every decoding step reads besides the cache; none here."""
        return ()

    def repeat_context(self, context, num_beams):
        """`context` with each row repeated per beam (beam search)."""
        return context

    def prefill(self, context, tokens, prefill_length):
        """The decoder cache filled from `tokens[:, :prefill_length]`.

        Slots past a row's prompt hold fill tokens' keys until the loop
        overwrites them, before they are read.
        """
        backbone = self.backbone
        batch_size, length = ops.shape(tokens)[0], ops.shape(tokens)[1]
        cache = backbone.empty_cache(batch_size, length)
        if prefill_length:
            _, cache = backbone.call_with_cache(
                tokens[:, :prefill_length], cache, 0, backbone.padding_mask_of(tokens)
            )
        return cache

    def decode_step(self, context, tokens, cache, index):
        """Logits (batch, vocabulary_size) for position `index` from the one before."""
        token = gen.previous_token(tokens, index)
        hidden, cache = self.backbone.call_with_cache(
            token, cache, index - 1, self.backbone.padding_mask_of(tokens)
        )
        return self.logits(hidden)[:, 0, :], cache

    def generation_inputs(self, rows):
        """`(encoder_inputs, decoder_rows, skip)` for the checked input rows.

        `skip` is how many leading decoder tokens are not returned: none
        here, the start token in a sequence-to-sequence model.
        """
        return (), rows, 0

    def check_generation_length(self, rows, max_new_tokens):
        """Whether decoding must slide its window (raises if it cannot)."""
        longest = max(len(row) for row in rows)
        return sliding_window.check_room(
            self.backbone.position_encoding,
            self.backbone.max_sequence_length,
            longest,
            max_new_tokens,
        )

    def decoder_buffer_length(self, longest, max_new_tokens):
        """The decoding buffer: the longest prompt plus the new tokens, rounded
        up to a multiple of 8 so that nearby lengths share one compiled loop."""
        return min(
            gen.bucket_length(longest + max_new_tokens),
            self.backbone.max_sequence_length,
        )

    # === Generation, written once for both families ===

    @property
    def fill_id(self):
        """The id written into padded slots: `padding_id`, or 0 without one."""
        return self.backbone.fill_id

    def default_stop_token_ids(self):
        """The preprocessor's end token, when it has one."""
        return None if self.preprocessor is None else self.preprocessor.end_token_id

    def _loop(self, sampler, stop_token_ids):
        """The compiled whole loop: context, prefill, then sample token by token."""
        beams = getattr(sampler, "num_beams", 1)

        def loop(encoder_inputs, tokens, mask, start, end, prefill_length):
            # `prefill_length` is a Python int (static): one pass over the
            # first `prefill_length` tokens fills the cache.
            context = self.encoder_context(encoder_inputs)
            cache = self.prefill(context, tokens, prefill_length)
            if beams > 1:  # the sampler repeats its own state, not closures
                context = self.repeat_context(context, beams)

            def next(tokens, cache, index):
                logits, cache = self.decode_step(context, tokens, cache, index)
                return logits, None, cache

            return gen.run_sampler(
                sampler, next, tokens, cache, start, mask, stop_token_ids, end
            )

        return gen.compile_loop(loop)

    def _stream_steps(self, sampler):
        """Compiled prefill and single sampling step, for host-side decoding."""

        def prefill(encoder_inputs, tokens):
            context = self.encoder_context(encoder_inputs)
            return context, self.prefill(context, tokens, ops.shape(tokens)[1])

        def step(context, tokens, cache, index):
            logits, cache = self.decode_step(context, tokens, cache, index)
            probabilities = sampler.compute_probabilities(logits)
            return sampler.get_next_token(probabilities), cache

        return gen.compile_loop(prefill), gen.compile_loop(step)

    def generate(
        self,
        inputs,
        max_new_tokens,
        sampler="greedy",
        temperature=None,
        top_k=None,
        top_p=None,
        num_beams=None,
        stop_token_ids=None,
        seed=None,
        length_penalty=None,
        stream=False,
        window_shift=None,
    ):
        """Continues each input by up to `max_new_tokens` tokens.

        The decoder prompts are right-padded into one batch; the cache is
        filled by one forward pass, then one token per step is decoded by an
        XLA-compiled loop (keras-hub samplers, or `BeamSearchSampler` for
        "beam"), kept per sampler setting in `compiled_loops` and retraced
        only for a new (batch, length), the length rounded up to a multiple
        of 8. Each row is decoded exactly as if it were alone.

        Past the context window: with rotary or sinusoidal positions, a
        prompt plus `max_new_tokens` may exceed `max_sequence_length` (L).
        When the window is full it slides by `window_shift` tokens: the last
        L - window_shift tokens are kept, the cache is re-filled from them
        (positions restart at 0) and decoding goes on (see
        `keras_tfm.generation.sliding_window`). With learned positions the
        error says how many new tokens still fit.

        Streaming (`stream=True`): the tokens are decoded one XLA-compiled
        step at a time on the host and `generate` returns a generator of the
        new pieces as they come.

        Args:
            inputs: the prompts (a causal LM) or the sources (a
                sequence-to-sequence model): a list of token-id lists (any
                lengths), one list, a dense (batch, seq) int array padded
                with `padding_id`, or with a preprocessor a string or a list
                of strings.
            max_new_tokens: how many tokens to add at most.
            sampler: "greedy", "random", "top_k", "top_p", "beam", or a
                `keras_hub.samplers.Sampler`. A setting the sampler does not
                read (`top_p` with "greedy", ...) is an error.
            temperature: divides the logits before the softmax (default 1).
            top_k, top_p: the cut-offs of "top_k" / "top_p" sampling
                (default 5 and 0.1).
            num_beams: the beam width of "beam" (beam search if > 1).
            stop_token_ids: ids that end a row's generation (kept in the
                output; dropped from strings). None: the preprocessor's end
                token when it has one; `[]` for none.
            seed: makes random sampling repeatable.
            length_penalty: the GNMT length-penalty exponent of beam search
                ((5 + n) / 6) ** alpha (default 0: none).
            stream: return a generator of new pieces instead of the outputs;
                not with beam search.
            window_shift: how far the window slides when it is full (rotary
                and sinusoidal positions only); default
                `max_sequence_length // 4`.

        Returns:
            Per input, the decoder prompt followed by the new tokens (see the
            class docstring): a list of lists of ids (one list for one
            input), or strings for string inputs (detokenized by
            `keras_tfm.data.detokenize`, without the stop token).
            With `stream=True`, a generator yielding at each step the new
            piece (a token id; with string inputs the new text), or for a
            list of inputs a list with one piece per input ("" or None where
            nothing is new); joined, the pieces are what the non-streamed
            call adds after the prompt.
        """
        vocabulary_size = self.backbone.vocabulary_size
        tokenize = None
        if self.preprocessor is not None:
            tokenize = self.preprocessor.generate_preprocess
        rows, kind = gen.normalize_token_batch(
            "inputs", inputs, vocabulary_size, self.backbone.padding_id, tokenize
        )
        check_positive_int("max_new_tokens", max_new_tokens)
        slides = self.check_generation_length(rows, max_new_tokens)
        window_shift = sliding_window.check_window_shift(
            window_shift, self.backbone.max_sequence_length
        )
        sampler, key = gen.make_sampler(
            sampler, temperature, top_k, top_p, num_beams, length_penalty,
            self.fill_id, seed,
        )  # fmt: skip
        if stop_token_ids is None:
            stop_token_ids = self.default_stop_token_ids()
        stop_token_ids = gen.check_stop_token_ids(stop_token_ids, vocabulary_size)
        encoder_inputs, decoder_rows, skip = self.generation_inputs(rows)
        if key[0] == "beam" and (stream or slides):
            raise ValueError(
                "Beam search runs as one compiled loop: it cannot stream or "
                f"slide the window. Received: stream={stream}, a prompt plus "
                f"max_new_tokens={max_new_tokens} past max_sequence_length="
                f"{self.backbone.max_sequence_length}"
            )
        if stream:
            return self._stream(
                encoder_inputs, decoder_rows, kind, max_new_tokens, sampler, key,
                seed, stop_token_ids, slides, window_shift, skip,
            )  # fmt: skip
        function, sampler = self.compiled_loops.get(
            (key, stop_token_ids),
            lambda: (self._loop(sampler, stop_token_ids), sampler),
        )
        gen.reset_seed(sampler, seed)
        if slides:
            results = sliding_window.generate_sliding(
                lambda tokens, mask, start: function(
                    encoder_inputs, tokens, mask, start, *[tokens.shape[1]] * 2
                ),
                decoder_rows,
                max_new_tokens,
                self.backbone.max_sequence_length,
                window_shift,
                self.fill_id,
                stop_token_ids,
            )
        else:
            results = self._generate_in_buffer(
                function, encoder_inputs, decoder_rows, max_new_tokens, stop_token_ids
            )
        results = [row[skip:] for row in results]
        return self._format(results, kind, stop_token_ids)

    def _generate_in_buffer(
        self, function, encoder_inputs, rows, max_new_tokens, stop_token_ids
    ):
        longest = max(len(row) for row in rows)
        # Positions past longest + max_new_tokens are not decoded, and cut off.
        length = self.decoder_buffer_length(longest, max_new_tokens)
        tokens, mask = gen.pad_rows(rows, length, self.fill_id)
        start_index = min(len(row) for row in rows)
        # The loop re-reads token start_index - 1; the prefill covers the
        # prompts (rounded up, so nearby lengths share the compiled loop).
        prefill_length = min(gen.bucket_length(start_index), length)
        outputs = ops.convert_to_numpy(
            function(
                encoder_inputs,
                tokens,
                mask,
                ops.convert_to_tensor(start_index, "int32"),
                ops.convert_to_tensor(longest + max_new_tokens, "int32"),
                prefill_length,
            )
        )
        return [
            gen.truncate_at_stop(
                outputs[i, : len(row) + max_new_tokens], len(row), stop_token_ids
            )
            for i, row in enumerate(rows)
        ]

    def _format(self, rows, kind, stop_token_ids):
        if kind in ("string", "strings"):
            return self.preprocessor.generate_postprocess(rows, kind, stop_token_ids)
        return gen.format_outputs(rows, kind, None, stop_token_ids)

    def _stream(
        self,
        encoder_inputs,
        rows,
        kind,
        max_new_tokens,
        sampler,
        key,
        seed,
        stop_token_ids,
        slides,
        window_shift,
        skip,
    ):
        """`generate(stream=True)`: the generator of new pieces."""
        (prefill, step), sampler = self.compiled_loops.get(
            ("stream", key),
            lambda: (self._stream_steps(sampler), sampler),
        )
        gen.reset_seed(sampler, seed)
        longest = max(len(row) for row in rows)
        length = self.backbone.max_sequence_length
        if not slides:
            length = self.decoder_buffer_length(longest, max_new_tokens)

        def prefill_state(tokens):
            return prefill(encoder_inputs, tokens)

        def step_state(tokens, state, index):
            context, cache = state
            sampled, cache = step(context, tokens, cache, index)
            return sampled, (context, cache)

        steps = sliding_window.stream_tokens(
            prefill_state,
            step_state,
            rows,
            max_new_tokens,
            length,
            window_shift if slides else None,
            self.fill_id,
            stop_token_ids,
        )
        return sliding_window.stream_pieces(
            steps,
            [row[skip:] for row in rows],
            kind,
            lambda ids: self._format([ids], "string", stop_token_ids),
        )

    def chat(self, messages, max_new_tokens=256, stream=False, **generate_kwargs):
        """The model's answer to a message or a conversation, as a string.

        The conversation is formatted by the tokenizer's chat template (with
        the opening of the assistant's turn), generated from until the
        tokenizer's end token (the end of the turn), and only the new tokens
        are decoded.

        Args:
            messages: a string (one user message) or a list of
                {"role": "system" | "user" | "assistant", "content": str}.
            max_new_tokens: the longest answer, in tokens.
            stream: return a generator of the answer's text pieces as they
                are generated (joined, they are the answer).
            **generate_kwargs: passed to `generate` (sampler, top_p, seed...).

        Returns:
            The answer, without the template's markup (a generator of its
            pieces with `stream=True`).

        Example:
        >>> model = keras_tfm.models.CausalLM.from_preset(  # doctest: +SKIP
        ...     "smollm2_135m_instruct")
        >>> model.chat("What is the capital of France?",  # doctest: +SKIP
        ...            max_new_tokens=16)
        'The capital of France is Paris.'
        """
        tokenizer = self.tokenizer
        if not callable(getattr(tokenizer, "apply_chat_template", None)):
            raise ValueError(
                "`chat` needs a model whose tokenizer has a chat template (e.g. "
                "the preset smollm2_135m_instruct). Received: a model with "
                f"tokenizer={type(tokenizer).__name__}"
            )
        check_positive_int("max_new_tokens", max_new_tokens)
        end_id = tokenizer.end_token_id
        prompt = [int(i) for i in tokenizer(tokenizer.apply_chat_template(messages))]
        kwargs = dict(stop_token_ids=(end_id,), **generate_kwargs)
        if stream:
            steps = self.generate(prompt, max_new_tokens, stream=True, **kwargs)
            return answer_pieces(tokenizer, steps, end_id)
        output = self.generate(prompt, max_new_tokens, **kwargs)
        answer = [int(i) for i in output[len(prompt) :]]
        if end_id in answer:
            answer = answer[: answer.index(end_id)]
        return tokenizer.detokenize(answer).strip()

    def load_weights(self, filepath, skip_mismatch=False, **kwargs):
        """Keras' `load_weights`, then `compiled_loops.invalidate()`.

        Loading assigns the same variables, which a traced loop reads; a
        file of another precision or quantization may replace them, so the
        loops are traced again.
        """
        super().load_weights(filepath, skip_mismatch=skip_mismatch, **kwargs)
        self.compiled_loops.invalidate()

    # === Configuration ===

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "backbone": keras.saving.serialize_keras_object(self.backbone),
                "preprocessor": keras.saving.serialize_keras_object(self.preprocessor),
                "tie_word_embeddings": self.tie_word_embeddings,
            }
        )
        return self._add_quantization_config(config)

    @classmethod
    def preprocessor_for(cls, tokenizer, backbone):
        """The default preprocessor of `tokenizer` for `backbone`."""
        return cls.preprocessor_class(
            tokenizer,
            sequence_length=backbone.max_sequence_length,
            padding_id=backbone.padding_id,
        )

    @classmethod
    def from_config(cls, config):
        config = split_legacy_config(cls, config)
        if isinstance(config["backbone"], dict):
            config["backbone"] = keras.saving.deserialize_keras_object(
                config["backbone"]
            )
        return cls._from_quantized_config(config)

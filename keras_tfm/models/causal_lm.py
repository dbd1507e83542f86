import contextlib

import keras
from keras import ops

from keras_tfm._keras_compat import compiled_metrics
from keras_tfm.chat import stateless
from keras_tfm.generation import (
    cached_steps,
    decode_loop,
    outputs,
    scoring,
    sliding_window,
    token_inputs,
)
from keras_tfm.generation.compiled_loops import CompiledLoops
from keras_tfm.generation.request import GenerationRequest, lists_settings
from keras_tfm.generation.strategies import DecoderInputs, strategy_for
from keras_tfm.models._common import make_lm_head
from keras_tfm.models.causal_lm_preprocessor import CausalLMPreprocessor
from keras_tfm.models.decoder_backbone import DecoderBackbone
from keras_tfm.models.hidden_state_loss import (
    MIN_VOCABULARY_SIZE,
    hidden_state_loss,
    token_loss_settings,
)
from keras_tfm.models.legacy_configs import constructor_arguments, split_legacy_config
from keras_tfm.models.quantization import QuantizationMixin
from keras_tfm.models.task import Task, check_backbone, restore_preprocessor
from keras_tfm.validation import check_rank


@keras.saving.register_keras_serializable(package="keras_tfm")
class CausalLM(QuantizationMixin, Task):
    """A decoder-only language model, and the base of `Seq2SeqLM`.

        h      = DecoderBackbone(x)
        logits = h E^T            (tied: the token embedding, transposed)
               | h W_lm           (untied: a bias-free Dense `lm_head`)

    The logits are float32. Decoding is `keras_tfm.generation`'s: this
    class supplies the cached steps it drives (`generation.cached_steps`),
    and `Seq2SeqLM` (encoder-decoder) its own context and decoder step.

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

    Training: `fit` computes a compiled sparse cross-entropy on logits
    (`keras.losses.SparseCategoricalCrossentropy(from_logits=True)`,
    `keras_tfm.training.TokenCrossEntropy`) from the final hidden states and
    the output projection, one chunk of tokens at a time, so the
    (batch, seq, vocabulary) float32 logits are never formed
    (`keras_tfm.kernels.linear_cross_entropy`; see
    `loss_from_hidden_states`). Inside that `fit`, a call with
    `training=True` returns `(hidden, logits or None)`, the logits only for
    compiled metrics; `evaluate`, `predict` and every other call return the
    logits.

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
    loss_from_hidden_states = "auto"
    """Whether `fit` computes its loss from the hidden states: True, False,
    or "auto" (the default: when the vocabulary has at least
    `hidden_state_loss.MIN_VOCABULARY_SIZE` words). It applies to the losses
    that `hidden_state_loss.token_loss_settings` accepts, a float output
    projection without a soft cap, and TensorFlow and JAX (PyTorch has no
    Keras custom gradient); anything else trains on the logits."""
    generation_config = None
    """The default `GenerationConfig` of `generate` and `chat`: what a preset's
    `generation_config.json` sets (`keras_tfm.zoo.from_preset`), None for
    the plain defaults (greedy). Whatever a call sets wins (see
    `keras_tfm.generation.generation_config.request_base`)."""

    def __init__(self, backbone, preprocessor=None, tie_word_embeddings=True, **kwargs):
        check_backbone(backbone, self.backbone_class)
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
            own = vars(self)  # torch keeps the backbone in `_modules`
            backbone = own.get("backbone") or own.get("_modules", {}).get("backbone")
            if backbone is not None and name in constructor_arguments(type(backbone)):
                return getattr(backbone, name)
        return super().__getattr__(name)  # torch's sublayers, else the task's error

    # === The family's parts: the head, and the cached step of generation ===

    def label_range(self):
        return self.backbone.vocabulary_size

    def logits(self, hidden):
        """float32 logits (batch, seq, vocabulary_size) of the hidden states."""
        if self.lm_head is None:  # its soft cap is the embedding's
            return self.backbone.token_embedding(hidden, reverse=True)
        logits = ops.cast(self.lm_head(hidden), "float32")
        cap = getattr(self.backbone, "final_logit_soft_cap", None)
        return logits if cap is None else cap * ops.tanh(logits / cap)

    def call(self, token_ids, training=None, return_attention_scores=False):
        outputs = self.backbone(
            token_ids,
            training=training,
            return_attention_scores=return_attention_scores,
        )
        if return_attention_scores:
            hidden, scores = outputs
            return self.logits(hidden), scores
        # Read when the step is traced: `compute_loss` and `compute_metrics`
        # of the same step see which of the two they were given.
        self._returned_hidden_states = bool(training) and self._fit_on_hidden_states
        if self._returned_hidden_states:
            # `fit`'s train step: `compute_loss` projects the hidden states;
            # the logits only for the metrics `compile` named, without a
            # gradient, from the weights before the step's update.
            logits = None
            if compiled_metrics(self) is not None:
                logits = ops.stop_gradient(self.logits(outputs))
            return outputs, logits
        return self.logits(outputs)

    # === Training from the hidden states ===

    _fit_on_hidden_states = False
    _returned_hidden_states = False
    _traced_on_hidden_states = None

    def output_table(self):
        """The output projection as a (vocabulary_size, hidden_dim) tensor, or
        None where the logits are not its plain product (quantized, bfloat16
        or block weights, a logit soft cap)."""
        if self.lm_head is not None:
            if (
                self.lm_head.quantization_mode is not None
                or getattr(self.backbone, "final_logit_soft_cap", None) is not None
            ):
                return None
            return ops.transpose(self.lm_head.kernel)
        embedding = self.backbone.token_embedding
        if (
            embedding.quantization_mode is not None
            or embedding.bfloat16_weights
            or embedding.block_weights
            or embedding.logit_soft_cap is not None
        ):
            return None
        if embedding.tie_weights:
            return embedding.embeddings
        return ops.transpose(embedding.reverse_embeddings)

    def trains_on_hidden_states(self):
        """Whether `fit`, as compiled now, computes the loss from the hidden
        states (`loss_from_hidden_states`)."""
        setting = self.loss_from_hidden_states
        if setting not in (True, False, "auto"):
            raise ValueError(
                "`loss_from_hidden_states` must be True, False or 'auto'. "
                f"Received: loss_from_hidden_states={setting!r}"
            )
        if setting == "auto":
            setting = self.backbone.vocabulary_size >= MIN_VOCABULARY_SIZE
        return (
            setting
            and keras.backend.backend() in ("tensorflow", "jax")
            and token_loss_settings(getattr(self, "loss", None)) is not None
            and self.output_table() is not None
        )

    @contextlib.contextmanager
    def _fitting(self):
        on_hidden = self.trains_on_hidden_states()
        if on_hidden != self._traced_on_hidden_states:
            self.train_function = None  # traced for the other output
        self._traced_on_hidden_states = on_hidden
        self._fit_on_hidden_states = on_hidden
        try:
            yield
        finally:
            self._fit_on_hidden_states = False

    def compute_loss(
        self, x=None, y=None, y_pred=None, sample_weight=None, training=True
    ):
        if not (training and self._returned_hidden_states):
            return super().compute_loss(x, y, y_pred, sample_weight, training=training)
        hidden, _ = y_pred
        loss = hidden_state_loss(
            self.loss, y, hidden, self.output_table(), sample_weight
        )
        if self.losses:  # the layers' own (regularizers), as Keras adds them
            loss = loss + ops.sum([ops.cast(extra, "float32") for extra in self.losses])
        return loss

    def compute_metrics(self, x, y, y_pred, sample_weight=None):
        if self._returned_hidden_states:
            _, y_pred = y_pred  # the logits, where metrics were compiled
        return super().compute_metrics(x, y, y_pred, sample_weight)

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
            cache_update_index: int or scalar tensor, or a (batch,) int
                vector: each row's own position (`keras_tfm.serving`).
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

    def prefill(self, context, tokens, start):
        """The decoder cache filled from `tokens[:, :start]` (and a little more).

        `start` may be a tensor: the prompt goes through in fixed-size chunks
        (`decode_loop.chunked_prefill`), so that every prompt length reuses
        the same compiled program. Slots past a row's prompt hold fill
        tokens' keys until the loop overwrites them, before they are read.
        """
        backbone = self.backbone
        batch_size, length = ops.shape(tokens)[0], ops.shape(tokens)[1]
        cache = backbone.empty_cache(batch_size, length)
        padding_mask = cached_steps.cache_padding_mask(backbone, tokens)

        def step(chunk, cache, begin):
            return backbone.call_with_cache(chunk, cache, begin, padding_mask)[1]

        return decode_loop.chunked_prefill(step, tokens, cache, start)

    def decode_step(self, context, tokens, cache, index):
        """Logits (batch, vocabulary_size) for position `index` from the one before."""
        token = cached_steps.previous_token(tokens, index)
        hidden, cache = self.backbone.call_with_cache(
            token,
            cache,
            index - 1,
            cached_steps.cache_padding_mask(self.backbone, tokens),
        )
        return self.logits(hidden)[:, 0, :], cache

    def generation_inputs(self, rows):
        """`(encoder_inputs, decoder_rows, skip)` for the checked input rows.

        `skip` is how many leading decoder tokens are not returned: none
        here, the start token in a sequence-to-sequence model.
        """
        return (), rows, 0

    def room_after(self, rows):
        """How many new tokens fit after the checked input rows: what learned
        positions leave after the longest, or None (the window slides)."""
        backbone, longest = self.backbone, max(len(row) for row in rows)
        return sliding_window.room(
            backbone.position_encoding, backbone.max_sequence_length, longest
        )

    def new_token_room(self, inputs):
        """The most `max_new_tokens` that `generate(inputs)` takes, or None
        where it has no limit (rotary or sinusoidal positions slide the
        window past its end).

        Example:
        >>> backbone = keras_tfm.models.DecoderBackbone(
        ...     vocabulary_size=50, num_layers=1, num_heads=2, hidden_dim=16,
        ...     intermediate_dim=32, max_sequence_length=16)
        >>> keras_tfm.models.CausalLM(backbone).new_token_room([[5, 6, 7], [8]])
        13
        """
        return self.room_after(self._generation_rows(inputs)[0])

    def _generation_rows(self, inputs):
        """`(rows, kind)` of `generate`'s inputs
        (`token_inputs.normalize_token_batch`)."""
        tokenize = None
        if self.preprocessor is not None:
            tokenize = self.preprocessor.generate_preprocess
        backbone = self.backbone
        return token_inputs.normalize_token_batch(
            "inputs", inputs, backbone.vocabulary_size, backbone.padding_id, tokenize
        )

    def check_generation_length(self, rows, max_new_tokens):
        """Whether decoding must slide its window (raises if it cannot)."""
        backbone, longest = self.backbone, max(len(row) for row in rows)
        return sliding_window.check_room(
            backbone.position_encoding, backbone.max_sequence_length, longest,
            max_new_tokens,
        )  # fmt: skip

    # === Generation: the engine is `keras_tfm.generation` ===

    is_decoder_only = True
    """Whether the decoder prompt is the prompt (False: an encoder-decoder
    model, whose decoder starts from its start token)."""

    @property
    def fill_id(self):
        """The id written into padded slots: `padding_id`, or 0 without one."""
        return self.backbone.fill_id

    def default_stop_token_ids(self):
        """The preprocessor's end token, when it has one."""
        return None if self.preprocessor is None else self.preprocessor.end_token_id

    prompt_through_step = 0
    """Streamed prompts of at most this many tokens go through a compiled
    step of their own one token at a time, not through the compiled loop
    that `generate` shares (see `keras_tfm.generation.strategies.streamed`):
    for a process that streams one short answer (`keras-tfm chat`); 0:
    always the shared loop."""

    @lists_settings
    def generate(
        self, inputs, max_new_tokens=None, generation_config=None, *,
        stream=False, **settings,
    ):  # fmt: skip
        """Continues each input by up to `max_new_tokens` tokens.

        The call becomes a `generation.request.GenerationRequest` (whose
        `validate` refuses the combinations no strategy runs), run by the
        strategy `generation.strategies.strategy_for` picks. The built-in
        samplers read every setting as a per-row tensor of one XLA-compiled
        loop per (batch, buffer length); beam search and a keras-hub sampler
        object compile their own. Each row is decoded as if it were alone
        (sampling from its own seed and positions). Past the context window
        (rotary or sinusoidal positions) the window slides by `window_shift`;
        with learned positions the error says how many new tokens fit.

        Args:
            inputs: the prompts (a causal LM) or the sources (a
                sequence-to-sequence model): a list of token-id lists (any
                lengths), one list, a dense (batch, seq) int array padded
                with `padding_id`, or with a preprocessor a string or a list
                of strings.
            max_new_tokens: how many tokens to add at most.
            generation_config: a `keras_tfm.generation.GenerationConfig` (or
                one per input) under the settings; None: the model's
                `generation_config` (a preset's defaults).
            stream: return a generator of the new pieces as they are decoded
                (one compiled step at a time; not with beam search, scores
                or a draft).
            **settings: `sampler` ("greedy" (default), "random", "top_k",
                "top_p", "beam", or a `keras_hub.samplers.Sampler`; a
                setting it does not read is an error), `temperature`,
                `top_k`, `top_p`, `min_p`, `num_beams`, `length_penalty`
                (GNMT's, beam search), `seed`, `repetition_penalty`,
                `presence_penalty`, `frequency_penalty`,
                `no_repeat_ngram_size`, `bad_words_ids` (see
                `GenerationConfig`); `stop_token_ids` (None: the
                preprocessor's end token; `[]`: none; kept in ids, dropped
                from strings); `stop_strings` (a row ends when its new text
                ends with one, checked on the tokens' bytes; strings are cut
                before it; needs a tokenizer; not with beam search or a
                sampler object); `window_shift` (default
                `max_sequence_length // 4`); `return_scores` (also return
                each new token's log-probability, before processors and
                temperature: `(outputs, scores)`; one buffer of the built-in
                samplers only); `top_logprobs` (n: with `return_scores`,
                also the n most likely `(token_id, log_probability)` pairs
                of each new token: `(outputs, scores, top)`); `draft`
                (speculative decoding of plain greedy output: "prompt_lookup",
                a smaller `CausalLM`, a `DecoderSteps` or a
                `SpeculativeDecoder`; decoder-only models);
                `response_format` (structured output, OpenAI's
                `{"type": "json_object" | "json_schema" | "regex", ...}`:
                `keras_tfm.generation.grammar`; not streamed).

        Returns:
            Per input, the decoder prompt followed by the new tokens (see the
            class docstring): a list of lists of ids (one list for one
            input), or strings for string inputs (without the stop token).
            With `stream=True`, a generator yielding at each step the new
            piece (a token id, or the new text), or for a list of inputs a
            list with one piece per input ("" or None where nothing is new);
            joined, the pieces are what the non-streamed call adds.
        """
        rows, kind = self._generation_rows(inputs)
        request = GenerationRequest.build(
            self, rows, max_new_tokens, generation_config, stream, **settings
        )
        decoder_inputs = DecoderInputs(*self.generation_inputs(rows))
        results = strategy_for(request, self).run(self, request, decoder_inputs)
        if request.stream:
            return outputs.format_stream(self, request, decoder_inputs, kind, results)
        return outputs.format_results(self, request, decoder_inputs, kind, results)

    def chat(self, messages, max_new_tokens=256, stream=False, **generate_kwargs):
        """The model's answer to a message or a conversation, as a string.

        The conversation is formatted by the tokenizer's chat template (with
        the opening of the assistant's turn), generated from until the
        tokenizer's end token (the end of the turn), and only the new tokens
        are decoded. The settings are the model's `generation_config` (a
        preset's defaults; greedy without one) under any given here.

        Args:
            messages: a string (one user message) or a list of
                {"role": "system" | "user" | "assistant", "content": str}.
            max_new_tokens: the longest answer, in tokens.
            stream: return a generator of the answer's text pieces as they
                are generated (joined, they are the answer).
            **generate_kwargs: passed to `generate` (sampler, top_p, seed,
                return_scores...); `stop_token_ids` end the answer as the
                end of the turn does.

        Returns:
            The answer, without the template's markup (a generator of its
            pieces with `stream=True`); with `return_scores=True`, what
            `generate` returns with the answer for its ids: `(answer,
            scores)` (see `keras_tfm.chat.chat`). A `keras_tfm.chat.ChatSession`
            keeps the cache of a conversation between turns.

        Example:
        >>> model = keras_tfm.models.CausalLM.from_preset(  # doctest: +SKIP
        ...     "smollm2_135m_instruct")
        >>> model.chat("What is the capital of France?",  # doctest: +SKIP
        ...            max_new_tokens=16)
        'The capital of France is Paris.'
        """
        return stateless.chat(self, messages, max_new_tokens, stream, **generate_kwargs)

    def score(self, texts):
        """The model's log-likelihood of each text, and how many tokens it sums.

            log_likelihood = sum_{t >= 1} log p(x_t | x_0 ... x_{t-1})

        over each text's tokens after the first (which has no context), from
        the float32 logits of one forward pass (`keras_tfm.generation.scoring`);
        the perplexity is exp(-log_likelihood / count).

        Args:
            texts: what `generate` takes: a string or a list of strings (with
                a preprocessor; tokenized as they are, no token added), token
                ids, a list of token-id lists, or a (batch, seq) array.

        Returns:
            `(log_likelihood, count)`: NumPy float64 and int64 (batch,).

        Example:
        >>> backbone = keras_tfm.models.DecoderBackbone(
        ...     vocabulary_size=50, num_layers=1, num_heads=2, hidden_dim=16,
        ...     intermediate_dim=32, max_sequence_length=16)
        >>> model = keras_tfm.models.CausalLM(backbone)
        >>> log_likelihood, count = model.score([[5, 6, 7], [8, 9]])
        >>> count.tolist(), bool(log_likelihood[0] < 0)
        ([2, 1], True)
        """
        return scoring.score_causal(self, texts)

    def load_weights(self, filepath, skip_mismatch=False, **kwargs):
        """Keras' `load_weights`, then `compiled_loops.invalidate()`: a file of
        another precision or quantization may replace the variables a traced
        loop reads, so the loops are traced again."""
        super().load_weights(filepath, skip_mismatch=skip_mismatch, **kwargs)
        self.compiled_loops.invalidate()

    def get_config(self):
        config = super().get_config()
        config["tie_word_embeddings"] = self.tie_word_embeddings
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

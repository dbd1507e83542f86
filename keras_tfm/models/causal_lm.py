import keras
import numpy as np
from keras import ops

from keras_tfm.chat import stateless
from keras_tfm.generation import (
    decode_loop,
    logit_processors,
    scoring,
    sliding_window,
)
from keras_tfm.generation import generation_utils as gen
from keras_tfm.generation import stop_strings as stop_text
from keras_tfm.generation.beam_search_sampler import BeamSearchSampler
from keras_tfm.generation.compiled_loops import CompiledLoops
from keras_tfm.generation.generation_config import (
    configs_for,
    request_base,
    settings_tensors,
)
from keras_tfm.generation.speculative import SpeculativeDecoder
from keras_tfm.models._common import make_lm_head
from keras_tfm.models.causal_lm_preprocessor import CausalLMPreprocessor
from keras_tfm.models.decoder_backbone import DecoderBackbone
from keras_tfm.models.legacy_configs import (
    constructor_arguments,
    split_legacy_config,
)
from keras_tfm.models.quantization import QuantizationMixin
from keras_tfm.models.task import Task, check_backbone, restore_preprocessor
from keras_tfm.validation import check_positive_int, check_rank
from keras_tfm_lite.stop_text import cut_at_stop_strings


def first(outputs):
    """The tokens of a compiled loop's outputs (the built-in loop returns a
    dict, see `decode_loop.decode`)."""
    return outputs["tokens"] if isinstance(outputs, dict) else outputs


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
        padding_mask = gen.cache_padding_mask(backbone, tokens)

        def step(chunk, cache, begin):
            return backbone.call_with_cache(chunk, cache, begin, padding_mask)[1]

        return decode_loop.chunked_prefill(step, tokens, cache, start)

    def decode_step(self, context, tokens, cache, index):
        """Logits (batch, vocabulary_size) for position `index` from the one before."""
        token = gen.previous_token(tokens, index)
        hidden, cache = self.backbone.call_with_cache(
            token, cache, index - 1, gen.cache_padding_mask(self.backbone, tokens)
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
        """The compiled whole loop of a keras-hub sampler or of beam search."""
        beams = getattr(sampler, "num_beams", 1)
        searches = isinstance(sampler, BeamSearchSampler)

        def loop(encoder_inputs, tokens, mask, start, end, settings):
            context = self.encoder_context(encoder_inputs)
            cache = self.prefill(context, tokens, start)
            if beams > 1:  # the sampler repeats its own state, not closures
                context = self.repeat_context(context, beams)

            def next(tokens, cache, index):
                logits, cache = self.decode_step(context, tokens, cache, index)
                return logits, None, cache

            if not searches:
                return gen.run_sampler(
                    sampler, next, tokens, cache, start, mask, stop_token_ids, end
                )
            repeated = {
                k: v if k == "token_bytes" else ops.repeat(v, beams, axis=0)
                for k, v in settings.items()
            }

            def process(logits, prompt, index, mask):
                return logit_processors.process_logits(
                    logits, prompt, index, mask, repeated, decode_loop.MAX_NGRAM_SIZE
                )

            return sampler(
                next, tokens, cache=cache, index=start, mask=mask,
                stop_token_ids=stop_token_ids, process_logits=process,
            )  # fmt: skip

        return gen.compile_loop(loop)

    def _decode_function(self, top_logprobs=0):
        """The compiled loop of the built-in samplers: every setting an input.

        One program per (batch, buffer length) (and source length for a
        sequence-to-sequence model): prefill by chunks, then
        `decode_loop.decode` (which also records the `top_logprobs` most
        likely tokens of each step). Returns its dict.
        """

        def loop(encoder_inputs, tokens, mask, start, end, settings):
            context = self.encoder_context(encoder_inputs)
            cache = self.prefill(context, tokens, start)

            def next(tokens, cache, index):
                return self.decode_step(context, tokens, cache, index)

            return decode_loop.decode(
                next, tokens, cache, start, end, mask, settings, top_logprobs
            )

        return gen.compile_loop(loop)

    def _stream_steps(self, sampler):
        """Compiled prefill and single step, for host-side decoding.

        `sampler` is a keras-hub sampler, or None for the built-in samplers
        (processors and per-row settings, as in `decode_loop`).
        """

        def prefill(encoder_inputs, tokens, start):
            context = self.encoder_context(encoder_inputs)
            return context, self.prefill(context, tokens, start)

        def step(context, tokens, cache, index, mask, settings):
            logits, cache = self.decode_step(context, tokens, cache, index)
            if sampler is None:
                return decode_loop.step_tokens(
                    logits, tokens, index, mask, settings
                )[0], cache
            probabilities = sampler.compute_probabilities(logits)
            return sampler.get_next_token(probabilities), cache

        return gen.compile_loop(prefill), gen.compile_loop(step)

    prompt_through_step = 64
    """Streamed prompts of at most this many tokens go through the compiled
    decoding step one token at a time, not through the compiled prefill.

    A process that streams one short answer (`keras-tfm chat "..."`) then
    traces and loads one compiled function, not two: tracing SmolLM2's
    prefill and loading its compiled program took ~8 CPU seconds of a
    second run, 64 steps take ~1 (benchmarks/cold_start.py). 0: always the
    prefill (a sequence-to-sequence model's context needs it)."""

    def decode_buffer_length(self, needed):
        """The buffer of the built-in samplers' loop: a power of two (at least
        64) holding `needed` positions, at most `max_sequence_length`. Few
        lengths, so few compiled programs; the loop stops at `needed`."""
        return min(
            max(64, 1 << max(0, needed - 1).bit_length()),
            self.backbone.max_sequence_length,
        )

    def generate(
        self,
        inputs,
        max_new_tokens,
        sampler=None,
        temperature=None,
        top_k=None,
        top_p=None,
        num_beams=None,
        stop_token_ids=None,
        seed=None,
        length_penalty=None,
        stream=False,
        window_shift=None,
        *,
        min_p=None,
        repetition_penalty=None,
        presence_penalty=None,
        frequency_penalty=None,
        no_repeat_ngram_size=None,
        bad_words_ids=None,
        stop_strings=None,
        return_scores=False,
        top_logprobs=None,
        generation_config=None,
        draft=None,
    ):
        """Continues each input by up to `max_new_tokens` tokens.

        The decoder prompts are right-padded into one batch; the cache is
        filled by chunks, then one token per step is decoded by an
        XLA-compiled loop. For the built-in samplers ("greedy", "random",
        "top_k", "top_p") every setting is a per-row tensor input of that
        loop (`keras_tfm.generation.decode_loop`), so it is compiled once per
        (batch, buffer length), the buffer a power of two: a new prompt
        length, temperature, top-k, top-p or penalty reuses it. Beam search
        (`BeamSearchSampler`) and a `keras_hub.samplers.Sampler` object run
        their own loops, compiled per setting. Each row is decoded exactly
        as if it were alone, sampling included (each row draws from its own
        seed and position).

        The logits of each step go through the processors (repetition,
        presence and frequency penalties, n-gram and word bans, in the order
        of `keras_tfm.generation.logit_processors`), then the sampler's
        warpers (temperature, top-k, top-p, min-p, in the order of
        `keras_tfm.generation.sampling`). Beam search applies the processors
        too; a keras-hub sampler object takes none.

        Past the context window: with rotary or sinusoidal positions, a
        prompt plus `max_new_tokens` may exceed `max_sequence_length` (L).
        When the window is full it slides by `window_shift` tokens: the last
        L - window_shift tokens are kept, the cache is re-filled from them
        (positions restart at 0) and decoding goes on (see
        `keras_tfm.generation.sliding_window`); the processors then see the
        window only. With learned positions the error says how many new
        tokens still fit.

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
            sampler: "greedy" (default), "random", "top_k", "top_p", "beam",
                or a `keras_hub.samplers.Sampler`. A setting the sampler does
                not read (`top_p` with "greedy", ...) is an error.
            temperature: divides the logits before sampling (default 1).
            top_k, top_p: the cut-offs of "top_k" / "top_p" sampling
                (default 5 and 0.1).
            num_beams: the beam width of "beam" (beam search if > 1).
            stop_token_ids: ids that end a row's generation (kept in the
                output; dropped from strings). None: the preprocessor's end
                token when it has one; `[]` for none.
            seed: makes sampling repeatable (each row samples from this seed
                and its own positions).
            length_penalty: the GNMT length-penalty exponent of beam search
                ((5 + n) / 6) ** alpha (default 0: none).
            stream: return a generator of new pieces instead of the outputs;
                not with beam search.
            window_shift: how far the window slides when it is full (rotary
                and sinusoidal positions only); default
                `max_sequence_length // 4`.
            min_p: drop tokens less likely than `min_p` times the most
                likely one (sampling only).
            repetition_penalty: HF's repetition penalty (1: off).
            presence_penalty, frequency_penalty: OpenAI's penalties on the
                tokens generated so far (0: off).
            no_repeat_ngram_size: forbid repeating any n-gram of this size.
            bad_words_ids: token sequences never to generate.
            stop_strings: a row ends when its new text ends with one of
                these (checked in the loop on the tokens' bytes, across token
                boundaries); strings are cut before it, ids end with the
                token that completed it. Needs a tokenizer; built-in
                samplers only. Streamed (also past the context window),
                checked on the host on the same bytes; no piece of a stop
                string is shown.
            return_scores: also return, per input, the model's
                log-probability of each new token (before processors and
                temperature): `(outputs, scores)`. Built-in samplers only,
                without streaming or a sliding window.
            top_logprobs: with `return_scores`, also return at each new
                token the n most likely tokens of the model's distribution
                (OpenAI's name, and its meaning: the distribution before
                processors and temperature): `(outputs, scores, top)`, `top`
                per input a list, per new token, of n `(token_id,
                log_probability)` pairs, most likely first. None or 0: off.
            generation_config: a `keras_tfm.generation.GenerationConfig` (or
                one per input) whose settings the arguments above override;
                None: the model's `generation_config` (a preset's
                defaults), under the arguments given.
            draft: speculative decoding of plain greedy output (the same
                tokens, fewer passes of this model): "prompt_lookup" (guesses
                copied from the prompt), a smaller `CausalLM` sharing the
                tokenizer, a `keras_tfm.generation.DecoderSteps`, or a
                `keras_tfm.generation.SpeculativeDecoder` (its `stats` then
                tell the acceptance rate). Decoder-only models, greedy
                without processors, not streamed.

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
        top_logprobs = scoring.check_top_logprobs(
            top_logprobs, return_scores, vocabulary_size
        )
        slides = self.check_generation_length(rows, max_new_tokens)
        window_shift = sliding_window.check_window_shift(
            window_shift, self.backbone.max_sequence_length
        )
        settings = dict(
            temperature=temperature, top_k=top_k, top_p=top_p, num_beams=num_beams,
            seed=seed, length_penalty=length_penalty, min_p=min_p,
            repetition_penalty=repetition_penalty, presence_penalty=presence_penalty,
            frequency_penalty=frequency_penalty,
            no_repeat_ngram_size=no_repeat_ngram_size, bad_words_ids=bad_words_ids,
            stop_strings=stop_strings,
        )  # fmt: skip
        if generation_config is None:
            generation_config = request_base(
                self.generation_config, sampler, num_beams, draft
            )
        configs, instance = configs_for(sampler, settings, generation_config, len(rows))
        if stop_token_ids is None:
            stop_token_ids = self.default_stop_token_ids()
        stop_token_ids = gen.check_stop_token_ids(stop_token_ids, vocabulary_size)
        encoder_inputs, decoder_rows, skip = self.generation_inputs(rows)
        beam = instance is None and configs[0].sampler == "beam"
        if beam and (stream or slides):
            raise ValueError(
                "Beam search runs as one compiled loop: it cannot stream or "
                f"slide the window. Received: stream={stream}, a prompt plus "
                f"max_new_tokens={max_new_tokens} past max_sequence_length="
                f"{self.backbone.max_sequence_length}"
            )
        if return_scores and (instance is not None or beam or stream or slides):
            raise ValueError(
                "`return_scores` is given by the built-in samplers' loop over "
                "one buffer: not with beam search, a sampler object, streaming "
                "or a sliding window. Received: return_scores with sampler="
                f"{sampler!r}, stream={stream}, sliding window={slides}"
            )
        if any(c.stop_strings for c in configs) and (
            instance is not None or beam or (slides and not stream)
        ):
            raise ValueError(
                "`stop_strings` are checked by the built-in samplers' loop (or, "
                "streaming, on the host): not with beam search or a sampler "
                "object, and past the context window only with stream=True. "
                f"Received: stop_strings with sampler={sampler!r}, "
                f"stream={stream}, sliding window={slides}"
            )
        if draft is not None:
            plain_greedy = instance is None and all(
                c.sampler == "greedy" and not c.uses_processors and not c.stop_strings
                for c in configs
            )
            decoder_only = type(self).generation_inputs is CausalLM.generation_inputs
            if not (plain_greedy and decoder_only) or stream or return_scores:
                raise ValueError(
                    "Speculative decoding (`draft`) reproduces plain greedy "
                    "decoding of a decoder-only model: no sampler settings, "
                    "processors, stop strings, streaming or scores. Received: "
                    f"draft={draft!r} with sampler={sampler!r}, stream={stream}, "
                    f"return_scores={return_scores}, model {type(self).__name__}"
                )
            if not isinstance(draft, SpeculativeDecoder):
                draft = self.compiled_loops.get(
                    ("speculative decoder", draft),
                    lambda: SpeculativeDecoder(self, draft),
                )
            results = draft.decode(decoder_rows, max_new_tokens, stop_token_ids)
            return self._format(results, kind, stop_token_ids)
        tensors = settings_tensors(configs, stop_token_ids)
        strings = [config.stop_strings for config in configs]
        tensors.update(self._stop_string_tensors(strings))
        if instance is not None or beam:
            if instance is None:
                instance, key = gen.make_sampler(
                    "beam", configs[0].temperature, None, None, configs[0].num_beams,
                    configs[0].length_penalty, self.fill_id,
                )  # fmt: skip
            else:
                key = ("instance", id(instance))
            gen.reset_seed(instance, seed)
        else:
            key = ("tensor",)
        if stream:
            return self._stream(
                encoder_inputs, decoder_rows, kind, max_new_tokens, instance, key,
                tensors, stop_token_ids, slides, window_shift, skip, strings,
            )  # fmt: skip
        if key == ("tensor",):
            function = self.compiled_loops.get(
                (key, top_logprobs), lambda: self._decode_function(top_logprobs)
            )
        else:
            function = self.compiled_loops.get(
                (key, stop_token_ids), lambda: self._loop(instance, stop_token_ids)
            )
        if slides:
            results = sliding_window.generate_sliding(
                lambda tokens, mask, start: first(function(
                    encoder_inputs, tokens, mask, start, np.int32(tokens.shape[1]),
                    tensors,
                )),
                decoder_rows,
                max_new_tokens,
                self.backbone.max_sequence_length,
                window_shift,
                self.fill_id,
                stop_token_ids,
            )  # fmt: skip
            scores = None
        else:
            results, scores, top = self._generate_in_buffer(
                function, encoder_inputs, decoder_rows, max_new_tokens, tensors,
                stop_token_ids, beam_buffer=key != ("tensor",),
            )  # fmt: skip
        results = [row[skip:] for row in results]
        prompts = [[int(t) for t in row[skip:]] for row in decoder_rows]
        outputs = self._format(results, kind, stop_token_ids, strings, prompts)
        if not return_scores:
            return outputs
        one = kind in ("string", "ids")
        if not top_logprobs:
            return outputs, (scores[0] if one else scores)
        return outputs, (scores[0] if one else scores), (top[0] if one else top)

    def _generate_in_buffer(
        self, function, encoder_inputs, rows, max_new_tokens, settings,
        stop_token_ids, beam_buffer,
    ):  # fmt: skip
        """Runs `function` over one buffer; returns the rows cut after their
        stop id, each row's log-probabilities of its new tokens, and (when
        the loop recorded them) each new token's most likely alternatives."""
        longest = max(len(row) for row in rows)
        if beam_buffer:
            # Beam search ranks its beams over the whole buffer: it keeps the
            # buffer it always had (a multiple of 8, exact for seq2seq).
            length = self.decoder_buffer_length(longest, max_new_tokens)
        else:
            length = self.decode_buffer_length(longest + max_new_tokens)
        tokens, mask = gen.pad_rows(rows, length, self.fill_id)
        start_index = min(len(row) for row in rows)
        outputs = function(
            encoder_inputs,
            tokens,
            mask,
            ops.convert_to_tensor(start_index, "int32"),
            ops.convert_to_tensor(longest + max_new_tokens, "int32"),
            settings,
        )
        ends, log_probabilities, top_ids = None, None, None
        if isinstance(outputs, dict):
            ends = ops.convert_to_numpy(outputs["ends"])
            log_probabilities = ops.convert_to_numpy(outputs["log_probabilities"])
            if "top_ids" in outputs:
                top_ids = ops.convert_to_numpy(outputs["top_ids"])
                top_values = ops.convert_to_numpy(outputs["top_log_probabilities"])
        outputs = ops.convert_to_numpy(first(outputs))
        results, scores, top = [], [], []
        for i, row in enumerate(rows):
            stop = len(row) + max_new_tokens
            if ends is not None:  # the loop says where each row stopped
                kept = [int(t) for t in outputs[i, : min(stop, ends[i])]]
            else:
                kept = gen.truncate_at_stop(outputs[i, :stop], len(row), stop_token_ids)
            results.append(kept)
            if log_probabilities is not None:
                scores.append(log_probabilities[i, len(row) : len(kept)].tolist())
            if top_ids is not None:
                new = slice(len(row), len(kept))
                top.append(scoring.alternatives(top_ids[i, new], top_values[i, new]))
        return results, scores, top

    def _format(self, rows, kind, stop_token_ids, strings=None, prompts=None):
        if kind not in ("string", "strings"):
            return gen.format_outputs(rows, kind, None, stop_token_ids)
        texts = self.preprocessor.generate_postprocess(rows, "strings", stop_token_ids)
        if strings and any(strings):
            # Cut before the stop string, searched in the new text only.
            starts = [0] * len(rows)
            if prompts is not None:
                starts = [
                    len(p) if t.startswith(p) else 0
                    for t, p in zip(texts, self._format(prompts, "strings", ()),
                                    strict=True)
                ]  # fmt: skip
            texts = [
                cut_at_stop_strings(text, row_strings, start)
                for text, row_strings, start in zip(texts, strings, starts, strict=True)
            ]
        return texts[0] if kind == "string" else texts

    def _stop_string_tensors(self, strings):
        """The loop's "stop_strings" and "token_bytes" entries: always there
        when the model has a tokenizer (one program with or without stop
        strings); refused without one."""
        tokenizer = None if self.preprocessor is None else self.tokenizer
        if tokenizer is None:
            if any(strings):
                raise ValueError(
                    "`stop_strings` needs the model's tokenizer to read the "
                    "text: build the model with a preprocessor, or pass "
                    f"stop_token_ids. Received: stop_strings={strings[0]!r}"
                )
            return {}
        table = stop_text.cached_byte_table(tokenizer, self.backbone.vocabulary_size)
        return {
            "stop_strings": stop_text.string_table(strings),
            "token_bytes": table,
        }

    def _stream(
        self,
        encoder_inputs,
        rows,
        kind,
        max_new_tokens,
        sampler,
        key,
        settings,
        stop_token_ids,
        slides,
        window_shift,
        skip,
        strings,
    ):
        """`generate(stream=True)`: the generator of new pieces; rows end on
        their stop `strings` on the host (`stop_strings.stop_at_strings`)."""
        prefill, step = self.compiled_loops.get(
            ("stream", key), lambda: self._stream_steps(sampler)
        )
        longest = max(len(row) for row in rows)
        length = self.backbone.max_sequence_length
        if not slides:
            length = self.decode_buffer_length(longest + max_new_tokens)
        through_step = longest <= self.prompt_through_step

        def prefill_state(tokens, start):
            if through_step and start == 0:  # the compiled prefill is not needed
                return (), self.backbone.empty_cache(tokens.shape[0], tokens.shape[1])
            return prefill(encoder_inputs, tokens, np.int32(start))

        def step_state(tokens, state, index, mask):
            context, cache = state
            sampled, cache = step(context, tokens, cache, index, mask, settings)
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
            prompt_through_step=through_step,
        )
        if any(strings):
            steps = stop_text.stop_at_strings(steps, strings, settings["token_bytes"])
        return sliding_window.stream_pieces(
            steps,
            [row[skip:] for row in rows],
            kind,
            lambda ids: self._format([ids], "string", stop_token_ids),
            strings,
        )

    def chat(self, messages, max_new_tokens=256, stream=False, **generate_kwargs):
        """The model's answer to a message or a conversation, as a string.

        The conversation is formatted by the tokenizer's chat template (with
        the opening of the assistant's turn), generated from until the
        tokenizer's end token (the end of the turn), and only the new tokens
        are decoded. The settings are the model's `generation_config` (a
        preset's defaults; greedy without one) under any given here.

        What to expect of a 135M model (smollm2_135m_instruct, tried with
        the questions a new user asks): a list of five fruits and the
        capital of France come out right; asked how many legs a spider has,
        it talks of "two pairs of legs" before it says 8; its steps for
        making tea repeat "kettle" and put the kettle into the pot; in a
        second turn it has forgotten the name the user gave in the first;
        a 200-token story repeats its sentences, which
        `repetition_penalty=1.2` prevented there. Short factual answers,
        yes; reasoning, counting and memory across turns, no.

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

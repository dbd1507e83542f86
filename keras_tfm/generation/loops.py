"""The compiled decoding functions, built on a model's cached steps.

Each drives the `cached_steps.CachedSteps` interface of a model and is kept
in the model's `compiled_loops` (dropped when its weights change):

- `decode_function`: the built-in samplers' loop, every setting a tensor
  input (`decode_loop.decode`); export traces it into its signatures;
- `resumable_function`: the same loop for a decoder-only model, taking and
  returning its cache: the one program of the buffered and the streamed
  strategies (`tensor_loop` keeps it);
- `sampler_loop`: a keras-hub sampler object's or beam search's own loop;
- `stream_steps`: a compiled prefill and a compiled single step, for the
  host-side loops that do not run on `resumable_function` (a keras-hub
  sampler object, an encoder-decoder model, a prompt through the step).

`loop_settings` gives the settings dict they all read, and
`sampler_and_key` names the loop a request runs on.
"""

import numpy as np
from keras import ops

from keras_tfm.generation import (
    backend,
    decode_loop,
    keras_hub_samplers,
    logit_processors,
)
from keras_tfm.generation import stop_strings as stop_text
from keras_tfm.generation.beam_search_sampler import BeamSearchSampler
from keras_tfm.generation.generation_config import settings_tensors

TENSOR_LOOP = ("tensor",)
"""The key of the built-in samplers' loop (settings as tensors)."""

RECORDED_TOP_LOGPROBS = 20
"""How many most likely tokens the built-in samplers' loop can record at
each step (the OpenAI API's most): one program serves every request for at
most that many (a "top_logprobs" setting switches the recording on), and
the host keeps the first n. A request for more compiles a loop of its own."""


def recorded_top_logprobs(top_logprobs, vocabulary_size):
    """How many alternatives the loop that serves `top_logprobs` records
    (at most the vocabulary).

    Example:
    >>> [recorded_top_logprobs(n, 50_000) for n in (0, 3, 20, 21)]
    [20, 20, 20, 21]
    >>> recorded_top_logprobs(3, vocabulary_size=12)
    12
    """
    return max(min(RECORDED_TOP_LOGPROBS, vocabulary_size), top_logprobs)


def decode_function(model, top_logprobs=0, compile=True):
    """The loop of the built-in samplers: every setting an input.

    `fn(encoder_inputs, tokens, mask, start, end, settings)` prefills by
    chunks, then runs `decode_loop.decode` (which also records the
    `top_logprobs` most likely tokens of each step); returns its dict. One
    program per (batch, buffer length) (and source length for a
    sequence-to-sequence model). `compile=False`: the Python function, to
    trace into another graph (an exported signature).
    """

    def loop(encoder_inputs, tokens, mask, start, end, settings):
        context = model.encoder_context(encoder_inputs)
        cache = model.prefill(context, tokens, start)

        def next(tokens, cache, index):
            return model.decode_step(context, tokens, cache, index)

        return decode_loop.decode(
            next, tokens, cache, start, end, mask, settings, top_logprobs
        )

    return backend.compile_loop(loop, (model,)) if compile else loop


def resumable_function(model, top_logprobs=0):
    """`decode_function`'s loop for a decoder-only model, resumable: one
    program for the whole buffer and for a position at a time.

    `fn(encoder_inputs, tokens, mask, start, end, settings, cache,
    prefill)`: where `prefill` (a bool scalar) is True, fills the cache
    from `tokens[:, :start]` (the given `cache`, zeros of
    `fresh_cache`'s shape, is not read), else decodes on from `cache`;
    returns `decode_loop.decode`'s dict with the "cache" after the last
    step. The buffered strategy calls it once (`fresh_cache`), the streamed
    strategy once per position with the cache it returned.
    """

    def loop(encoder_inputs, tokens, mask, start, end, settings, cache, prefill):
        context = model.encoder_context(encoder_inputs)
        cache = ops.cond(
            prefill, lambda: model.prefill(context, tokens, start), lambda: cache
        )

        def next(tokens, cache, index):
            return model.decode_step(context, tokens, cache, index)

        return decode_loop.decode(
            next, tokens, cache, start, end, mask, settings, top_logprobs,
            keep_cache=True,
        )  # fmt: skip

    return backend.compile_loop(loop, (model,))


def fresh_cache(model, tokens):
    """`(cache, prefill)`: the arguments that make `resumable_function`
    prefill a new (batch, length) buffer `tokens`."""
    batch, length = ops.shape(tokens)[0], ops.shape(tokens)[1]
    return model.backbone.empty_cache(batch, length), np.array(True)


def tensor_loop(model, top_logprobs=0):
    """The built-in samplers' compiled loop (recording the alternatives of
    `recorded_top_logprobs`), built once: `resumable_function` for a
    decoder-only model, `decode_function` for an encoder-decoder one."""
    top = recorded_top_logprobs(top_logprobs, model.backbone.vocabulary_size)
    build = resumable_function if model.is_decoder_only else decode_function
    return model.compiled_loops.get((TENSOR_LOOP, top), lambda: build(model, top))


def sampler_loop(model, sampler, stop_token_ids, compile=True):
    """The whole loop of a keras-hub sampler object or of beam search.

    `fn(encoder_inputs, tokens, mask, start, end, settings)` returns the
    decoded (batch, length) buffer. Beam search applies the logit
    processors of `settings`; a sampler object takes none.
    """
    beams = getattr(sampler, "num_beams", 1)
    searches = isinstance(sampler, BeamSearchSampler)

    def loop(encoder_inputs, tokens, mask, start, end, settings):
        context = model.encoder_context(encoder_inputs)
        cache = model.prefill(context, tokens, start)
        if beams > 1:  # the sampler repeats its own state, not closures
            context = model.repeat_context(context, beams)

        def next(tokens, cache, index):
            logits, cache = model.decode_step(context, tokens, cache, index)
            return logits, None, cache

        if not searches:
            return keras_hub_samplers.run_sampler(
                sampler, next, tokens, cache, start, mask, stop_token_ids, end,
                model=model,
            )  # fmt: skip
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
            stop_token_ids=stop_token_ids, process_logits=process, model=model,
        )  # fmt: skip

    # The sampler's seed is a variable the loop advances.
    return backend.compile_loop(loop, (model, sampler)) if compile else loop


def stream_step(model, sampler):
    """`step(context, tokens, cache, index, mask, settings) -> (tokens,
    cache)`, not compiled: the tokens sampled for position `index` and the
    cache with the keys of `index - 1`. `sampler` is a keras-hub sampler, or
    None for the built-in samplers (processors and per-row settings, as in
    `decode_loop`)."""

    def step(context, tokens, cache, index, mask, settings):
        logits, cache = model.decode_step(context, tokens, cache, index)
        if sampler is None:
            token, _ = decode_loop.step_tokens(logits, tokens, index, mask, settings)
            return token, cache
        probabilities = sampler.compute_probabilities(logits)
        return sampler.get_next_token(probabilities), cache

    return step


def stream_steps(model, sampler):
    """Compiled `prefill(encoder_inputs, tokens, start) -> (context, cache)`
    and `stream_step(model, sampler)`, for host-side decoding."""

    def prefill(encoder_inputs, tokens, start):
        context = model.encoder_context(encoder_inputs)
        return context, model.prefill(context, tokens, start)

    owners = (model,) if sampler is None else (model, sampler)
    step = stream_step(model, sampler)
    return backend.compile_loop(prefill, (model,)), backend.compile_loop(step, owners)


def sampler_and_key(model, request):
    """`(sampler, key)`: the keras-hub sampler object a request's loop runs
    (beam search's, or the one it was given; its seed reset to the
    request's) and the key of its compiled loop; `(None, TENSOR_LOOP)` for
    the built-in samplers."""
    if request.tensor_loop:
        return None, TENSOR_LOOP
    config = request.configs[0]
    instance = request.instance
    if instance is None:
        instance, key = keras_hub_samplers.make_sampler(
            "beam", config.temperature, None, None, config.num_beams,
            config.length_penalty, model.fill_id,
        )  # fmt: skip
    else:
        key = ("instance", id(instance))
    keras_hub_samplers.reset_seed(instance, config.seed)
    return instance, key


def whole_loop(model, request, sampler, key):
    """The compiled loop over one buffer that runs `request`, built once."""
    if key == TENSOR_LOOP:
        function = tensor_loop(model, request.top_logprobs)
        if not model.is_decoder_only:
            return function

        def whole(encoder_inputs, tokens, mask, start, end, settings):
            return function(encoder_inputs, tokens, mask, start, end, settings,
                            *fresh_cache(model, tokens))  # fmt: skip

        return whole
    stops = request.stop_token_ids
    return model.compiled_loops.get(
        (key, stops), lambda: sampler_loop(model, sampler, stops)
    )


def stop_string_tensors(model, strings):
    """The loop's "stop_strings" and "token_bytes" entries: always there
    when the model has a tokenizer (one program with or without stop
    strings); refused without one."""
    tokenizer = None if model.preprocessor is None else model.tokenizer
    if tokenizer is None:
        if any(strings):
            raise ValueError(
                "`stop_strings` needs the model's tokenizer to read the "
                "text: build the model with a preprocessor, or pass "
                f"stop_token_ids. Received: stop_strings={strings[0]!r}"
            )
        return {}
    table = stop_text.cached_byte_table(tokenizer, model.backbone.vocabulary_size)
    return {
        "stop_strings": stop_text.string_table(strings),
        "token_bytes": table,
    }


def loop_settings(model, request):
    """The settings dict every loop reads: `settings_tensors` of the rows'
    configs and stop ids, and the stop-string tables; for the built-in
    samplers, also "top_logprobs" (whether the loop records them)."""
    tensors = settings_tensors(request.configs, request.stop_token_ids)
    tensors.update(stop_string_tensors(model, request.stop_strings))
    if request.tensor_loop:
        tensors["top_logprobs"] = np.int32(request.top_logprobs)
    return tensors

"""The compiled decoding functions, built on a model's cached steps.

Each drives the `cached_steps.CachedSteps` interface of a model and is kept
in the model's `compiled_loops` (dropped when its weights change):

- `decode_function`: the built-in samplers' loop, every setting a tensor
  input (`decode_loop.decode`); export traces it into its signatures;
- `sampler_loop`: a keras-hub sampler object's or beam search's own loop;
- `stream_steps`: a compiled prefill and a compiled single step, for the
  host-side loops (streaming, and the window sliding past the context).

`loop_settings` gives the settings dict they all read, and
`sampler_and_key` names the loop a request runs on.
"""

from keras import ops

from keras_tfm.generation import decode_loop, logit_processors
from keras_tfm.generation import generation_utils as gen
from keras_tfm.generation import stop_strings as stop_text
from keras_tfm.generation.beam_search_sampler import BeamSearchSampler
from keras_tfm.generation.generation_config import settings_tensors

TENSOR_LOOP = ("tensor",)
"""The key of the built-in samplers' loop (settings as tensors)."""


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

    return gen.compile_loop(loop, (model,)) if compile else loop


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

    # The sampler's seed is a variable the loop advances.
    return gen.compile_loop(loop, (model, sampler)) if compile else loop


def stream_steps(model, sampler):
    """Compiled `prefill(encoder_inputs, tokens, start) -> (context, cache)`
    and `step(context, tokens, cache, index, mask, settings) -> (tokens,
    cache)`, for host-side decoding. `sampler` is a keras-hub sampler, or
    None for the built-in samplers (processors and per-row settings, as in
    `decode_loop`)."""

    def prefill(encoder_inputs, tokens, start):
        context = model.encoder_context(encoder_inputs)
        return context, model.prefill(context, tokens, start)

    def step(context, tokens, cache, index, mask, settings):
        logits, cache = model.decode_step(context, tokens, cache, index)
        if sampler is None:
            token, _ = decode_loop.step_tokens(logits, tokens, index, mask, settings)
            return token, cache
        probabilities = sampler.compute_probabilities(logits)
        return sampler.get_next_token(probabilities), cache

    owners = (model,) if sampler is None else (model, sampler)
    return gen.compile_loop(prefill, (model,)), gen.compile_loop(step, owners)


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
        instance, key = gen.make_sampler(
            "beam", config.temperature, None, None, config.num_beams,
            config.length_penalty, model.fill_id,
        )  # fmt: skip
    else:
        key = ("instance", id(instance))
    gen.reset_seed(instance, config.seed)
    return instance, key


def whole_loop(model, request, sampler, key):
    """The compiled loop over one buffer that runs `request`, built once."""
    if key == TENSOR_LOOP:
        top = request.top_logprobs
        return model.compiled_loops.get((key, top), lambda: decode_function(model, top))
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
    configs and stop ids, and the stop-string tables."""
    tensors = settings_tensors(request.configs, request.stop_token_ids)
    tensors.update(stop_string_tensors(model, request.stop_strings))
    return tensors

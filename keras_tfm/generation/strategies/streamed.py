"""Streaming: one compiled step at a time on the host, new tokens yielded.

A compiled prefill and a compiled single step (`loops.stream_steps`) are
driven by `sliding_window.stream_tokens`, which also slides the window
past the context; rows end on their stop strings on the host
(`stop_strings.stop_at_strings`, on the loop's own byte table).

A prompt of at most `model.prompt_through_step` tokens goes through the
compiled step one token at a time instead of the compiled prefill: a
process that streams one short answer (`keras-tfm chat "..."`) then traces
and loads one compiled function, not two (tracing SmolLM2's prefill and
loading its program took ~8 CPU seconds of a second run, 64 steps ~1;
benchmarks/cold_start.py).
"""

import numpy as np

from keras_tfm.generation import buffers, loops, sliding_window
from keras_tfm.generation import stop_strings as stop_text


def run(model, request, inputs):
    """A generator of steps: per step, each row's new token id or None."""
    sampler, key = loops.sampler_and_key(model, request)
    prefill, step = model.compiled_loops.get(
        ("stream", key), lambda: loops.stream_steps(model, sampler)
    )
    settings = loops.loop_settings(model, request)
    rows, encoder_inputs = inputs.rows, inputs.encoder_inputs
    longest = max(len(row) for row in rows)
    length = model.backbone.max_sequence_length
    if not request.slides:
        length = buffers.buffer_length(longest + request.max_new_tokens, length)
    through_step = longest <= model.prompt_through_step

    def prefill_state(tokens, start):
        if through_step and start == 0:  # the compiled prefill is not needed
            return (), model.backbone.empty_cache(tokens.shape[0], tokens.shape[1])
        return prefill(encoder_inputs, tokens, np.int32(start))

    def step_state(tokens, state, index, mask):
        context, cache = state
        sampled, cache = step(context, tokens, cache, index, mask, settings)
        return sampled, (context, cache)

    steps = sliding_window.stream_tokens(
        prefill_state,
        step_state,
        rows,
        request.max_new_tokens,
        length,
        request.window_shift if request.slides else None,
        model.fill_id,
        request.stop_token_ids,
        prompt_through_step=through_step,
    )
    strings = request.stop_strings
    if any(strings):
        steps = stop_text.stop_at_strings(steps, strings, settings["token_bytes"])
    return steps

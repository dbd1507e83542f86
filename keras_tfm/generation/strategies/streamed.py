"""Streaming: one position at a time on the host, new tokens yielded.

A decoder-only model with the built-in samplers streams on the buffered
strategy's own compiled loop (`loops.resumable_function`): the first call
prefills and decodes one position, each next call decodes one more from the
cache the last one returned. After a `generate`, streaming compiles nothing,
and each streamed token is the token the whole loop decodes. Otherwise (a
keras-hub sampler object, an encoder-decoder model, whose context every step
reads, or a prompt through the step, below) a compiled prefill and a
compiled single step (`loops.stream_steps`) run it. Both are driven by
`stream_tokens`, which also slides the window past the
context; rows end on their stop strings on the host
(`stop_strings.stop_at_strings`, on the loop's own byte table).

A prompt of at most `model.prompt_through_step` tokens (0 by default) goes
through the compiled single step one token at a time instead: a process
that streams one short answer and nothing else (`keras-tfm chat "..."`)
then traces and loads one small program, the step, not the loop's prefill
and step (tracing SmolLM2's prefill and loading its program took ~8 CPU
seconds of a second run, 64 steps ~1; benchmarks/cold_start.py).
"""

import numpy as np
from keras import ops

from keras_tfm.generation import buffers, loops
from keras_tfm.generation import stop_strings as stop_text
from keras_tfm.generation.sliding_window import append_new, window_of
from keras_tfm.generation.token_inputs import pad_rows


def on_the_loop(model, request, settings):
    """`(prefill, step)` for `stream_tokens` on the buffered strategy's
    compiled loop (a decoder-only model, the built-in samplers)."""
    function = loops.tensor_loop(model)
    tensors = {name: ops.convert_to_tensor(value) for name, value in settings.items()}

    def prefill_state(tokens, start):
        return None  # the first step's call prefills

    def step_state(tokens, cache, index, mask):
        prefill = np.array(False)
        if cache is None:
            cache, prefill = loops.fresh_cache(model, tokens)
        outputs = function(
            (), tokens, mask, index, np.int32(index + 1), tensors, cache, prefill
        )
        decoded = ops.convert_to_numpy(outputs["tokens"])
        return decoded[:, index], outputs["cache"]

    return prefill_state, step_state


def on_steps(model, request, settings, encoder_inputs, through_step):
    """`(prefill, step)` for `stream_tokens` on a compiled prefill and a
    compiled single step."""
    sampler, key = loops.sampler_and_key(model, request)
    prefill, step = model.compiled_loops.get(
        ("stream", key), lambda: loops.stream_steps(model, sampler)
    )

    def prefill_state(tokens, start):
        if through_step and start <= 1:  # the compiled prefill is not needed
            return (), model.backbone.empty_cache(tokens.shape[0], tokens.shape[1])
        return prefill(encoder_inputs, tokens, np.int32(start))

    def step_state(tokens, state, index, mask):
        context, cache = state
        sampled, cache = step(context, tokens, cache, index, mask, settings)
        return sampled, (context, cache)

    return prefill_state, step_state


def run(model, request, inputs):
    """A generator of steps: per step, each row's new token id or None."""
    settings = loops.loop_settings(model, request)
    rows = inputs.rows
    longest = max(len(row) for row in rows)
    length = model.backbone.max_sequence_length
    if not request.slides:
        length = buffers.buffer_length(longest + request.max_new_tokens, length)
    through_step = longest <= model.prompt_through_step
    if request.tensor_loop and model.is_decoder_only and not through_step:
        prefill_state, step_state = on_the_loop(model, request, settings)
    else:
        prefill_state, step_state = on_steps(
            model, request, settings, inputs.encoder_inputs, through_step
        )
    steps = stream_tokens(
        prefill_state,
        step_state,
        rows,
        request.max_new_tokens,
        length,
        request.window_shift if request.slides else None,
        model.fill_id,
        request.stop_token_ids,
        start=1 if through_step else None,
    )
    strings = request.stop_strings
    if any(strings):
        steps = stop_text.stop_at_strings(steps, strings, settings["token_bytes"])
    return steps


def stream_tokens(
    prefill,
    step,
    rows,
    max_new_tokens,
    buffer_length,
    window_shift,
    fill_id,
    stop_token_ids,
    start=None,
):
    """Decodes token by token on the host, yielding each step's new tokens.

    `prefill(tokens, start)` fills a cache from the first `start` positions
    of a (batch, buffer_length) buffer; `step(tokens, cache, index, mask)`
    returns `(next_tokens, cache)`, the tokens sampled for position `index`
    from the buffer before it (`mask`: True on the prompt positions). When the buffer
    is full and rows still need tokens, the window slides by `window_shift`
    (None: never) and the cache is re-filled.

    `start`: the first position stepped, after `prefill(tokens, start)`
    (default: the shortest row's length, the prompts prefilled). With 1,
    the prompts go through `step` one token at a time (`prefill(tokens, 1)`
    writes nothing): for a short prompt, what saves tracing and loading the
    compiled prefill (seconds) at the price of a few steps. A caller that
    keeps a cache (`ChatSession`) starts where its cache ends.

    Yields, per step, a list with one entry per row: the new token id, or
    None for a row that is still reading its prompt or is done. Every row
    ends after `max_new_tokens` new tokens or a stop id (which is yielded).
    """
    windows = [window_of(r, buffer_length, window_shift or 1) for r in rows]
    tokens, mask = pad_rows(windows, buffer_length, fill_id)
    counts, done = [0] * len(rows), [False] * len(rows)
    index = min(len(w) for w in windows) if start is None else start
    cache = prefill(tokens, index)
    while not all(done):
        if index == buffer_length:
            if window_shift is None:
                raise ValueError(
                    f"The decoding buffer of {buffer_length} tokens is full "
                    "and cannot slide."
                )
            kept = buffer_length - window_shift
            tokens = np.concatenate(
                [
                    tokens[:, window_shift:],
                    np.full_like(tokens[:, :window_shift], fill_id),
                ],
                axis=1,
            )
            mask = np.zeros_like(mask)
            index = kept
            cache = prefill(tokens, index)
        sampled, cache = step(tokens, cache, np.int32(index), mask)
        sampled = np.asarray(sampled).reshape(-1)
        new = [None] * len(rows)
        for i in range(len(rows)):
            if mask[i, index]:
                continue  # still the prompt
            tokens[i, index] = sampled[i]
            if not done[i]:
                new[i] = int(sampled[i])
                counts[i], done[i] = append_new(
                    [], [new[i]], counts[i], max_new_tokens, stop_token_ids
                )
        index += 1
        if any(token is not None for token in new):
            yield new

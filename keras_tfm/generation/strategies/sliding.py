"""Past the context window: a whole compiled loop per window.

When a prompt plus `max_new_tokens` exceeds `max_sequence_length` (rotary
or sinusoidal positions), each window is decoded to the end of a
(batch, max_sequence_length) buffer, then slides by `window_shift`
(`generate_sliding`; the window arithmetic is `sliding_window`'s).
"""

import numpy as np

from keras_tfm.generation import loops
from keras_tfm.generation.sliding_window import append_new, window_of
from keras_tfm.generation.strategies.buffered import first
from keras_tfm.generation.token_inputs import pad_rows


def run(model, request, inputs):
    """`(rows, None, None)` decoded window by window."""
    sampler, key = loops.sampler_and_key(model, request)
    function = loops.whole_loop(model, request, sampler, key)
    settings = loops.loop_settings(model, request)

    def window(tokens, mask, start):
        return first(function(
            inputs.encoder_inputs, tokens, mask, start,
            np.int32(tokens.shape[1]), settings,
        ))  # fmt: skip

    rows = generate_sliding(
        window,
        inputs.rows,
        request.max_new_tokens,
        model.backbone.max_sequence_length,
        request.window_shift,
        model.fill_id,
        request.stop_token_ids,
    )
    return rows, None, None


def generate_sliding(
    function,
    rows,
    max_new_tokens,
    max_sequence_length,
    window_shift,
    fill_id,
    stop_token_ids,
):
    """Runs the compiled loop window by window until every row is done.

    `function(tokens, mask, start_index)` is the model's compiled decoding
    loop over a (batch, max_sequence_length) buffer; each call fills every
    row's window to the end of the buffer. Returns the rows (prompt and new
    tokens, cut after a stop id).
    """
    texts = [[int(t) for t in row] for row in rows]
    counts, done = [0] * len(rows), [False] * len(rows)
    while not all(done):
        windows = [window_of(t, max_sequence_length, window_shift) for t in texts]
        tokens, mask = pad_rows(windows, max_sequence_length, fill_id)
        start_index = np.int32(min(len(w) for w in windows))
        outputs = np.asarray(function(tokens, mask, start_index))
        for i, window in enumerate(windows):
            if not done[i]:
                counts[i], done[i] = append_new(
                    texts[i],
                    outputs[i, len(window) :],
                    counts[i],
                    max_new_tokens,
                    stop_token_ids,
                )
    return texts

"""Past the context window: a whole compiled loop per window.

When a prompt plus `max_new_tokens` exceeds `max_sequence_length` (rotary
or sinusoidal positions), each window is decoded to the end of a
(batch, max_sequence_length) buffer, then slides by `window_shift`
(`sliding_window.generate_sliding`).
"""

import numpy as np

from keras_tfm.generation import loops, sliding_window
from keras_tfm.generation.strategies.buffered import first


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

    rows = sliding_window.generate_sliding(
        window,
        inputs.rows,
        request.max_new_tokens,
        model.backbone.max_sequence_length,
        request.window_shift,
        model.fill_id,
        request.stop_token_ids,
    )
    return rows, None, None

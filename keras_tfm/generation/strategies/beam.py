"""Beam search's, or a keras-hub sampler object's, own compiled loop.

Compiled per setting (the sampler object is part of the program). Beam
search ranks its beams over the whole buffer, so the buffer is the one it
always had (`buffers.beam_buffer_length`); a sampler object shares it.
"""

from keras_tfm.generation import buffers, loops
from keras_tfm.generation.strategies.buffered import run_in_buffer


def run(model, request, inputs):
    """`(rows, [], [])` of the sampler's loop over one buffer."""
    sampler, key = loops.sampler_and_key(model, request)
    function = loops.whole_loop(model, request, sampler, key)
    length = buffers.beam_buffer_length(
        max(len(row) for row in inputs.rows), request.max_new_tokens,
        model.backbone.max_sequence_length, exact=not model.is_decoder_only,
    )  # fmt: skip
    settings = loops.loop_settings(model, request)
    return run_in_buffer(model, request, inputs, function, settings, length)

"""The built-in samplers' loop over one buffer: every setting a tensor.

One compiled program per (batch, buffer length): the buffer is
`buffers.buffer_length` of the longest prompt plus the new tokens, and the
loop stops at that position, so a new prompt length, temperature, top-k,
top-p, penalty, seed or stop id reuses it.
"""

from keras import ops

from keras_tfm.generation import buffers, loops, scoring, token_inputs
from keras_tfm.generation.outputs import truncate_at_stop


def run_in_buffer(model, request, inputs, function, settings, length):
    """Runs `function` over a buffer of `length`; returns the rows cut after
    their stop id, each row's log-probabilities of its new tokens, and
    (when the loop recorded them) each new token's most likely
    alternatives."""
    rows, max_new_tokens = inputs.rows, request.max_new_tokens
    longest = max(len(row) for row in rows)
    tokens, mask = token_inputs.pad_rows(rows, length, model.fill_id)
    outputs = function(
        inputs.encoder_inputs,
        tokens,
        mask,
        ops.convert_to_tensor(min(len(row) for row in rows), "int32"),
        ops.convert_to_tensor(longest + max_new_tokens, "int32"),
        settings,
    )
    ends, log_probabilities, top_ids = None, None, None
    if isinstance(outputs, dict):
        ends = ops.convert_to_numpy(outputs["ends"])
        log_probabilities = ops.convert_to_numpy(outputs["log_probabilities"])
        if request.top_logprobs:  # the loop records at least that many
            n = request.top_logprobs
            top_ids = ops.convert_to_numpy(outputs["top_ids"])[..., :n]
            top_values = ops.convert_to_numpy(outputs["top_log_probabilities"])
            top_values = top_values[..., :n]
    outputs = ops.convert_to_numpy(first(outputs))
    results, scores, top = [], [], []
    for i, row in enumerate(rows):
        stop = len(row) + max_new_tokens
        if ends is not None:  # the loop says where each row stopped
            kept = [int(t) for t in outputs[i, : min(stop, ends[i])]]
        else:
            kept = truncate_at_stop(outputs[i, :stop], len(row), request.stop_token_ids)
        results.append(kept)
        if log_probabilities is not None:
            scores.append(log_probabilities[i, len(row) : len(kept)].tolist())
        if top_ids is not None:
            new = slice(len(row), len(kept))
            top.append(scoring.alternatives(top_ids[i, new], top_values[i, new]))
    return results, scores, top


def first(outputs):
    """The tokens of a compiled loop's outputs (the built-in loop returns a
    dict, see `decode_loop.decode`)."""
    return outputs["tokens"] if isinstance(outputs, dict) else outputs


def run(model, request, inputs):
    """`(rows, scores, top)` of the built-in samplers' loop."""
    function = loops.whole_loop(model, request, None, loops.TENSOR_LOOP)
    longest = max(len(row) for row in inputs.rows)
    length = buffers.buffer_length(
        longest + request.max_new_tokens, model.backbone.max_sequence_length
    )
    settings = loops.loop_settings(model, request)
    return run_in_buffer(model, request, inputs, function, settings, length)

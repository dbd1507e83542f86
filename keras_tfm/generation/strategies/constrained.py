"""Structured output: the built-in samplers' loop with a token automaton's mask.

Each row carries its automaton state (`grammar.TokenAutomaton`) beside the
cache. Before each step the state moves on by the token the previous step
wrote (prompt positions leave it alone), and the step's logits are -inf
wherever the state allows no token: the processors and the sampler
(`decode_loop.decode`, unchanged) then only ever choose allowed tokens,
and a stop token only once the text is complete. The tables are inputs
of one compiled program per (batch, buffer length, table shape): a new
schema of the same padded size reuses it.
"""

from keras import ops

from keras_tfm.generation import backend, buffers, decode_loop, grammar, loops
from keras_tfm.generation.strategies.buffered import run_in_buffer

NEG_INF = float("-inf")


def masked_step(step, tokens_mask, next_state, token_class):
    """`step(tokens, cache, index) -> (logits, cache)` wrapped to carry and
    apply the automaton: the returned function takes and returns
    `(cache, state)`, state int32 (batch,)."""
    classes = ops.shape(next_state)[1]
    flat = ops.reshape(next_state, (-1,))

    def next(tokens, carried, index):
        cache, state = carried
        previous = ops.maximum(index - 1, 0)
        written = ops.take(tokens, previous, axis=1)  # (batch,)
        generated = ops.logical_and(
            ops.logical_not(ops.take(tokens_mask, previous, axis=1)), index > 0
        )
        moved = ops.take(flat, state * classes + ops.take(token_class, written))
        state = ops.where(generated, ops.maximum(moved, 0), state)
        logits, cache = step(tokens, cache, index)
        rows = ops.take(next_state, state, axis=0)  # (batch, classes)
        allowed = ops.take(rows, token_class, axis=1) >= 0  # (batch, V)
        return ops.where(allowed, logits, NEG_INF), (cache, state)

    return next


def constrained_function(model):
    """`fn(encoder_inputs, tokens, mask, start, end, settings, next_state,
    token_class)`: `loops.decode_function`'s loop under the automaton."""

    def loop(encoder_inputs, tokens, mask, start, end, settings, next_state,
             token_class):  # fmt: skip
        context = model.encoder_context(encoder_inputs)
        cache = model.prefill(context, tokens, start)

        def step(tokens, cache, index):
            return model.decode_step(context, tokens, cache, index)

        next = masked_step(step, mask, next_state, token_class)
        state = ops.zeros((ops.shape(tokens)[0],), "int32")
        return decode_loop.decode(
            next, tokens, (cache, state), start, end, mask, settings
        )

    return backend.compile_loop(loop, (model,))


def automaton_for(model, request):
    """The request's `TokenAutomaton` over the model's tokenizer (cached)."""
    return grammar.cached_automaton(
        model.tokenizer, model.backbone.vocabulary_size, request.regex,
        request.stop_token_ids,
    )  # fmt: skip


def run(model, request, inputs):
    """`(rows, [], [])`: each row's new text matches the request's regex
    (when it ended on a stop token rather than at `max_new_tokens`)."""
    automaton = automaton_for(model, request)
    function = model.compiled_loops.get(
        ("constrained",), lambda: constrained_function(model)
    )
    tables = (
        ops.convert_to_tensor(automaton.next_state, "int32"),
        ops.convert_to_tensor(automaton.token_class, "int32"),
    )

    def masked(*arguments):
        return function(*arguments, *tables)

    longest = max(len(row) for row in inputs.rows)
    length = buffers.buffer_length(
        longest + request.max_new_tokens, model.backbone.max_sequence_length
    )
    settings = loops.loop_settings(model, request)
    return run_in_buffer(model, request, inputs, masked, settings, length)

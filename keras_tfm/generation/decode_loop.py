"""The decoding loop of the built-in samplers: settings are tensors.

One `ops.while_loop` decodes positions `index ... end - 1` of a buffer with
the model's cached step, the logit processors and the sampler, all reading
the per-row settings dict (`settings_tensors`) as inputs. Compiled once per
(batch, buffer length), it serves every temperature, top-k, top-p, min-p,
penalty, seed and stop id without being traced again.
"""

from keras import ops

from keras_tfm.generation import logit_processors, sampling, stop_strings

MAX_NGRAM_SIZE = 8


def take_column(x, index):
    """`x[:, index]` as a gather: XLA takes `index` at run time (no recompile)."""
    return ops.take(x, index, axis=1)


def step_tokens(logits, tokens, index, prompt_mask, settings):
    """The next token per row from `logits` (batch, V): processors, sampler,
    and the prompt's own token where the row is still in its prompt."""
    processed = logit_processors.process_logits(
        logits, tokens, index, prompt_mask, settings, MAX_NGRAM_SIZE
    )
    token = sampling.next_tokens(processed, settings, index)
    forced = take_column(prompt_mask, index)
    return ops.where(forced, take_column(tokens, index), token), forced


def is_stop(token, stop_token_ids):
    """bool (batch,): whether `token` is one of the row's stop ids."""
    return ops.any(ops.equal(token[:, None], stop_token_ids), axis=-1)


def chosen_log_probabilities(logits, token, top_logprobs=0):
    """float32 (batch,): the model's log-probability of `token` (before any
    processor or temperature), log_softmax(logits)[token].

    With `top_logprobs` n > 0, also the n most likely tokens of that
    distribution: `(chosen, top_values, top_ids)`, float32 and int32
    (batch, n), most likely first (ties: the lower id first).

    Example:
    >>> logits = np.log(np.array([[0.5, 0.2, 0.3]], "float32"))
    >>> chosen, values, ids = chosen_log_probabilities(logits, np.array([2]), 2)
    >>> ops.convert_to_numpy(ids).tolist(), round(float(np.exp(values[0, 1])), 3)
    ([[0, 2]], 0.3)
    """
    log_probabilities = ops.log_softmax(ops.cast(logits, "float32"), axis=-1)
    token = ops.cast(token, "int32")
    chosen = ops.take_along_axis(log_probabilities, token[:, None], axis=1)[:, 0]
    if not top_logprobs:
        return chosen
    values, ids = ops.top_k(log_probabilities, k=top_logprobs)
    return chosen, values, ops.cast(ids, "int32")


def record_top(state, logits, token, column, forced, top_logprobs):
    """A function returning the state's "top_log_probabilities" and
    "top_ids" with the step's `top_logprobs` most likely tokens written at
    `column` (bool (1, length)) of the rows not `forced`."""

    def recorded():
        _, values, ids = chosen_log_probabilities(logits, token, top_logprobs)
        at = column[:, :, None] & ops.logical_not(forced)[:, None, None]
        return tuple(
            ops.where(at, top[:, None, :], state[name])
            for name, top in (("top_log_probabilities", values), ("top_ids", ids))
        )

    return recorded


def decode(
    next, tokens, cache, index, end, prompt_mask, settings, top_logprobs=0,
    keep_cache=False,
):  # fmt: skip
    """Decodes `tokens` from `index` to `end` (exclusive).

    Args:
        next: `next(tokens, cache, index) -> (logits, cache)`, logits
            float32 (batch, V) for position `index` (the model's step).
        tokens: int32 (batch, length), the prompts right-padded.
        cache: the loop-carried cache (any nest of tensors).
        index: scalar int32, the first position to decode.
        end: scalar int32, the position after the last one to decode.
        prompt_mask: bool (batch, length), True on prompt positions.
        settings: the dict of `settings_tensors`, as tensors; with
            "stop_strings" (batch, n, M) and "token_bytes" (V, W) (see
            `stop_strings`), rows also end on a stop string; with
            "top_logprobs" (a scalar int32), the top tokens are recorded
            only where it is > 0 (one program records or not).
        top_logprobs: n >= 0 (a Python int: the program's shape); with
            n > 0, each step also records the n most likely tokens.
        keep_cache: also return the cache after the last step ("cache"),
            for a caller that decodes on from it.

    Returns:
        A dict: "tokens", the buffer with positions `index ... end - 1`
        decoded; "log_probabilities", float32 (batch, length), the model's
        log-probability of each decoded token (0 elsewhere); "ends", int32
        (batch,), the position after each row's stop id or the token that
        completed a stop string (`length` for a row that did not stop). The
        loop ends early when every row has stopped. With `top_logprobs`
        n > 0, also "top_log_probabilities" float32 and "top_ids" int32
        (batch, length, n): at each decoded position the model's n most
        likely tokens and their log-probabilities (0 and 0 elsewhere).
    """
    tokens = ops.cast(tokens, "int32")
    prompt_mask = ops.cast(prompt_mask, "bool")
    index = ops.cast(index, "int32")
    end = ops.cast(end, "int32")
    stop_token_ids = settings["stop_token_ids"]
    strings = settings.get("stop_strings")
    record = settings.get("top_logprobs")
    batch, length = ops.shape(tokens)[0], ops.shape(tokens)[1]
    state = {
        "tokens": tokens,
        "log_probabilities": ops.zeros((batch, length), "float32"),
        "ends": ops.full((batch,), length, "int32"),
    }
    if top_logprobs:
        shape = (batch, length, top_logprobs)
        state["top_log_probabilities"] = ops.zeros(shape, "float32")
        state["top_ids"] = ops.zeros(shape, "int32")
    if strings is not None:
        table = settings["token_bytes"]
        tail_size = strings.shape[2] + table.shape[1]
        state["tail"] = ops.full((batch, tail_size), -1, "int32")

    def cond(state, cache, index):
        return ops.any(state["ends"] == length)

    def body(state, cache, index):
        tokens = state["tokens"]
        logits, cache = next(tokens, cache, index)
        token, forced = step_tokens(logits, tokens, index, prompt_mask, settings)
        column = (ops.arange(length, dtype="int32") == index)[None, :]
        new = dict(state)
        new["tokens"] = ops.where(column, token[:, None], tokens)
        if top_logprobs:
            write = record_top(state, logits, token, column, forced, top_logprobs)

            def keep():
                return state["top_log_probabilities"], state["top_ids"]

            # Off, neither the top-k nor the writes run.
            top = write() if record is None else ops.cond(record > 0, write, keep)
            new["top_log_probabilities"], new["top_ids"] = top
        chosen = chosen_log_probabilities(logits, token)
        chosen = ops.where(forced, 0.0, chosen)
        new["log_probabilities"] = ops.where(
            column, chosen[:, None], state["log_probabilities"]
        )
        stopped = is_stop(token, stop_token_ids)
        if strings is not None:
            added = ops.where(forced[:, None], -1, ops.take(table, token, axis=0))
            new["tail"], count = stop_strings.append_bytes(state["tail"], added)
            hit = stop_strings.ends_with_stop_string(new["tail"], strings, count)
            stopped = ops.logical_or(stopped, hit)
        stopped = stopped & ops.logical_not(forced) & (state["ends"] == length)
        new["ends"] = ops.where(stopped, index + 1, state["ends"])
        return new, cache, index + 1

    state, cache, _ = ops.while_loop(
        cond,
        body,
        (state, cache, index),
        maximum_iterations=ops.maximum(end - index, 0),
    )
    state.pop("tail", None)
    if keep_cache:
        state["cache"] = cache
    return state


PREFILL_CHUNKS = (128, 16)
"""The prefill's chunk sizes: whole chunks of 128 while they fit in the
shortest prompt, then chunks of 16 (the last may run up to 15 positions past
it: those slots are overwritten before they are read). A prompt of any length
reuses the same compiled chunks."""


def chunk_sizes(chunks, length):
    """The chunk sizes (largest first) worth a loop for a buffer of `length`.

    A chunk at least as long as the buffer runs only for a prompt that fills
    it (never when generating), and the smaller chunks cover that case too:
    dropping its loop saves tracing and compiling one copy of the model. The
    last (smallest) size always stays; `length` a tensor keeps them all.

    Example:
    >>> chunk_sizes((128, 16), 64), chunk_sizes((128, 16), 512)
    ((16,), (128, 16))
    """
    if not isinstance(length, int):
        return tuple(chunks)
    return tuple(size for size in chunks[:-1] if size < length) + (chunks[-1],)


def chunked_prefill(step, tokens, cache, start, chunks=PREFILL_CHUNKS, begin=0):
    """Fills `cache` with positions `begin ... start - 1` of `tokens`, by
    chunks: one loop per size of `chunks`, each while whole chunks of it
    fit before `start`, the last until `start` is covered. A chunk that
    would run past the buffer starts earlier instead, recomputing keys the
    cache already holds, which equal the ones it writes.

    Args:
        step: `step(chunk_tokens, cache, begin) -> cache`, the model's cached
            forward pass over the tokens at positions `begin ...`.
        tokens: int (batch, length); `length` static, or known when XLA
            compiles the loop.
        cache: the empty cache.
        start: scalar int32 (a tensor: any value, one program).
        chunks: the chunk sizes, largest first.
        begin: the first position to fill (a tensor too).

    Returns:
        The filled cache.
    """
    length = ops.shape(tokens)[1]  # traced for any length (an exported
    # graph): a tensor, which XLA still compiles as a constant
    start = ops.cast(start, "int32")
    begin = ops.cast(begin, "int32")
    chunks = chunk_sizes(chunks, length)
    for position, size in enumerate(chunks):
        size = (
            min(size, length) if isinstance(length, int) else ops.minimum(size, length)
        )
        last = position == len(chunks) - 1

        def cond(begin, cache, size=size, last=last):
            return begin < start if last else begin + size <= start

        def body(begin, cache, size=size):
            first = ops.minimum(begin, length - size)
            chunk = ops.take(tokens, first + ops.arange(size, dtype="int32"), axis=1)
            return begin + size, step(chunk, cache, first)

        begin, cache = ops.while_loop(cond, body, (begin, cache))
    return cache

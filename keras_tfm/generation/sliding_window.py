"""Decoding past the context window, and decoding one step at a time.

A model whose positions are rotary or sinusoidal can continue a text longer
than its `max_sequence_length` L, as nanoGPT's `generate` does by cropping
the context to the last L tokens. Here the key/value cache holds the window:
when it is full, the window slides by `window_shift` tokens (the last
L - window_shift tokens are kept), the cache is re-filled from them in one
parallel pass (positions restart at 0), and decoding continues. So every new
token is predicted from the last L - window_shift to L - 1 tokens, exactly as
the uncached forward pass over those tokens would predict it.

The default shift, L // 4, amortises the refill: one parallel pass over
3/4 of the window per L // 4 new tokens, while every token still sees at
least 3/4 of a window of context. A shift of 1 re-fills at every step (the
most context, the most work).

Learned positions have no embedding beyond L: `check_room` then says how
many new tokens still fit.
"""

import numpy as np

from keras_tfm.generation.token_inputs import pad_rows


def default_window_shift(max_sequence_length):
    """`max_sequence_length // 4`, at least 1: see the module docstring."""
    return max(1, max_sequence_length // 4)


def check_window_shift(window_shift, max_sequence_length):
    """The shift to use: `window_shift`, or the default when None."""
    if window_shift is None:
        return default_window_shift(max_sequence_length)
    if (
        isinstance(window_shift, bool)
        or not isinstance(window_shift, (int, np.integer))
        or not 1 <= window_shift < max_sequence_length
    ):
        raise ValueError(
            "`window_shift` must be an integer in [1, max_sequence_length="
            f"{max_sequence_length}). Received: window_shift={window_shift!r}"
        )
    return int(window_shift)


def room(position_encoding, max_sequence_length, longest):
    """How many new tokens fit after a prompt of `longest` tokens: what
    learned positions leave of `max_sequence_length` (0 or less: none), or
    None where the window slides (no limit).

    Example:
    >>> room("learned", 128, 6), room("rotary", 128, 6)
    (122, None)
    """
    if position_encoding != "learned":
        return None
    return max_sequence_length - longest


def check_room(position_encoding, max_sequence_length, longest, max_new_tokens):
    """Whether decoding must slide; raises if learned positions cannot.

    Returns True when the longest prompt plus `max_new_tokens` exceeds
    `max_sequence_length` (then the window slides), False when it fits.
    """
    if longest + max_new_tokens <= max_sequence_length:
        return False
    room_left = room(position_encoding, max_sequence_length, longest)
    if room_left is None:
        return True
    limit = (
        f"This model's learned positions stop at max_sequence_length="
        f"{max_sequence_length} tokens (prompt plus new tokens)"
    )
    if room_left <= 0:
        raise ValueError(
            f"{limit}, and the longest prompt already has {longest} tokens: no "
            f"new token fits. Shorten the prompt to at most "
            f"{max_sequence_length - 1} tokens. Received: prompt length "
            f"{longest}, max_new_tokens={max_new_tokens}"
        )
    raise ValueError(
        f"{limit}: after the longest prompt ({longest} tokens) at most "
        f"{room_left} new tokens can be generated. Pass max_new_tokens <= "
        f"{room_left}, or "
        "shorten the prompt (each token cut allows one more new token); models "
        "with rotary or sinusoidal positions slide their window instead. "
        f"Received: max_new_tokens={max_new_tokens}"
    )


def window_of(tokens, max_sequence_length, window_shift):
    """The part of `tokens` the next token is predicted from.

    The whole of `tokens` while it is shorter than `max_sequence_length`,
    else its last `max_sequence_length - window_shift` tokens.
    """
    if len(tokens) < max_sequence_length:
        return list(tokens)
    return list(tokens[len(tokens) - (max_sequence_length - window_shift) :])


def _append(text, new, count, max_new_tokens, stop_token_ids):
    """Adds new tokens to a row; returns (count, done)."""
    for token in new:
        text.append(int(token))
        count += 1
        if count >= max_new_tokens or (stop_token_ids and token in stop_token_ids):
            return count, True
    return count, False


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
                counts[i], done[i] = _append(
                    texts[i],
                    outputs[i, len(window) :],
                    counts[i],
                    max_new_tokens,
                    stop_token_ids,
                )
    return texts


def stream_tokens(
    prefill,
    step,
    rows,
    max_new_tokens,
    buffer_length,
    window_shift,
    fill_id,
    stop_token_ids,
    prompt_through_step=False,
):
    """Decodes token by token on the host, yielding each step's new tokens.

    `prefill(tokens, start)` fills a cache from the first `start` positions
    of a (batch, buffer_length) buffer; `step(tokens, cache, index, mask)`
    returns `(next_tokens, cache)`, the tokens sampled for position `index`
    from the buffer before it (`mask`: True on the prompt positions). When the buffer
    is full and rows still need tokens, the window slides by `window_shift`
    (None: never) and the cache is re-filled.

    `prompt_through_step`: the prompts go through `step` one token at a
    time (after `prefill(tokens, 0)`, an empty cache) instead of through
    `prefill`: for a short prompt, what saves tracing and loading the
    compiled prefill (seconds) at the price of a few steps.

    Yields, per step, a list with one entry per row: the new token id, or
    None for a row that is still reading its prompt or is done. Every row
    ends after `max_new_tokens` new tokens or a stop id (which is yielded).
    """
    windows = [window_of(r, buffer_length, window_shift or 1) for r in rows]
    tokens, mask = pad_rows(windows, buffer_length, fill_id)
    counts, done = [0] * len(rows), [False] * len(rows)
    index = min(len(w) for w in windows)
    if prompt_through_step:  # each prompt token's step samples nothing kept
        cache, index = prefill(tokens, 0), 1
    else:
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
                counts[i], done[i] = _append(
                    [], [new[i]], counts[i], max_new_tokens, stop_token_ids
                )
        index += 1
        if any(token is not None for token in new):
            yield new

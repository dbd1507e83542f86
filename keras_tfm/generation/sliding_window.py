"""The window arithmetic of decoding past the context window.

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
many new tokens still fit. The strategies that slide are `sliding` (a
whole compiled loop per window) and `streamed` (a step at a time).
"""

import numpy as np


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


def append_new(text, new, count, max_new_tokens, stop_token_ids):
    """Adds the `new` tokens to a row's `text` until it is done (after
    `max_new_tokens` new tokens or a stop id); returns `(count, done)`."""
    for token in new:
        text.append(int(token))
        count += 1
        if count >= max_new_tokens or (stop_token_ids and token in stop_token_ids):
            return count, True
    return count, False

"""`--max-new-tokens` fitted to the model: a default never asks for more
new tokens than the prompt leaves positions for (it is capped, said in one
line on stderr), and a value given that does not fit is refused in one line
naming the limit."""

import sys


def fit_max_new_tokens(given, default, room, positions):
    """The `max_new_tokens` to decode with.

    Args:
        given: `--max-new-tokens` as given, or None.
        default: the command's default.
        room: how many new tokens fit after the prompt
            (`CausalLM.new_token_room`), None: no limit.
        positions: the model's `max_sequence_length`, for the messages.

    Example:
    >>> fit_max_new_tokens(None, 200, 122, 128)  # and says so on stderr
    122
    >>> fit_max_new_tokens(None, 200, None, 128), fit_max_new_tokens(5, 200, 122, 128)
    (200, 5)
    """
    if room is not None and room <= 0:
        raise SystemExit(
            f"keras-tfm: the prompt fills the model's {positions} positions: "
            "no new token fits; shorten it."
        )
    if given is not None:
        if room is not None and given > room:
            raise SystemExit(
                f"keras-tfm: --max-new-tokens {given} does not fit: {room} of "
                f"the model's {positions} positions are left after the prompt; "
                f"pass at most {room}."
            )
        return given
    if room is not None and default > room:
        print(
            f"keras-tfm: --max-new-tokens {room}: the positions left of the "
            f"model's {positions} (the default is {default}).",
            file=sys.stderr,
        )
        return room
    return default


def fit_to_model(model, prompts, given, default):
    """`fit_max_new_tokens` for `model` (`CausalLM.new_token_room` of
    `prompts`; a model without it has no limit)."""
    new_token_room = getattr(model, "new_token_room", None)
    room = new_token_room(prompts) if callable(new_token_room) else None
    positions = getattr(getattr(model, "backbone", None), "max_sequence_length", None)
    return fit_max_new_tokens(given, default, room, positions)

"""Argument and input checks shared by the whole package.

Every check raises a `ValueError` that names the argument and quotes the
value received, so that a bad call fails at the line that made it rather
than as a NaN or a silent broadcast three layers later. Float settings are
refused when not finite (NaN, infinity), whatever their range.
"""

import math
import numbers

NORMALIZATIONS = ("layer_norm", "rms_norm")


def check_positive_int(name, value):
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(
            f"`{name}` must be a positive integer. Received: {name}={value!r}"
        )
    return value


def check_token_id(name, value, vocabulary_size, optional=False):
    """An id in [0, vocabulary_size) (an int or NumPy integer), as an int.

    With `optional=True`, None passes too (e.g. "no padding id").

    Example:
    >>> check_token_id("padding_id", 0, 10)
    0
    >>> check_token_id("start_id", 10, 10, optional=True)
    Traceback (most recent call last):
    ...
    ValueError: `start_id` must be None or an id in [0, 10). Received: start_id=10
    """
    if optional and value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Integral)
        or not 0 <= value < vocabulary_size
    ):
        allowed = "None or an id" if optional else "an id"
        raise ValueError(
            f"`{name}` must be {allowed} in [0, {vocabulary_size}). "
            f"Received: {name}={value!r}"
        )
    return int(value)


def check_int_at_least(name, value, minimum, requirement):
    """Raises unless `value` is an int (not a bool) of at least `minimum`;
    `requirement` says so in words ("an integer >= 3 (room for ...)")."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"`{name}` must be {requirement}. Received: {name}={value!r}")
    return value


def check_heads(num_heads, head_dim, num_key_value_heads):
    """Validates the head layout; returns `(head_dim, num_key_value_heads)`."""
    check_positive_int("num_heads", num_heads)
    if head_dim is not None:
        check_positive_int("head_dim", head_dim)
    if num_key_value_heads is not None:
        check_positive_int("num_key_value_heads", num_key_value_heads)
        if num_heads % num_key_value_heads:
            raise ValueError(
                "`num_heads` must be a multiple of `num_key_value_heads`. Received: "
                f"num_heads={num_heads}, num_key_value_heads={num_key_value_heads}"
            )
    return head_dim, num_key_value_heads


def check_finite_float(name, value):
    """A finite number (an int or a float, not a bool), as a float.

    NaN and infinity are refused: every comparison with NaN is False, so a
    range check alone (`value <= 0`) lets it through.
    """
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
    ):
        raise ValueError(
            f"`{name}` must be a finite number. Received: {name}={value!r}"
        )
    return float(value)


def check_rate(name, value):
    value = check_finite_float(name, value)
    if not 0.0 <= value < 1.0:
        raise ValueError(f"`{name}` must be in [0, 1). Received: {name}={value!r}")
    return value


def check_positive_float(name, value):
    """A finite number > 0, as a float (NaN and infinity are refused)."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value <= 0
    ):
        raise ValueError(
            f"`{name}` must be a positive finite number. Received: {name}={value!r}"
        )
    return float(value)


def check_choice(name, value, choices):
    if value not in choices:
        raise ValueError(
            f"`{name}` must be one of {list(choices)}. Received: {name}={value!r}"
        )
    return value


def check_rank(name, tensor, rank, meaning):
    """Checks the static rank of `tensor`, e.g. `meaning="(batch, seq, dim)"`."""
    if len(tensor.shape) != rank:
        raise ValueError(
            f"`{name}` must have rank {rank}, {meaning}. "
            f"Received: {name}.shape={tuple(tensor.shape)}"
        )


def check_label_shape(labels, scores, scores_name):
    """Checks that `labels` have the shape of `scores` without its last axis
    (the classes or the hidden units); unknown dimensions are not checked."""
    if len(labels.shape) != len(scores.shape) - 1 or any(
        t is not None and p is not None and t != p
        for t, p in zip(labels.shape, scores.shape[:-1], strict=False)
    ):
        raise ValueError(
            f"`y_true` must have the shape of {scores_name} without its last "
            f"axis. Received: y_true.shape={tuple(labels.shape)}, "
            f"{scores_name}.shape={tuple(scores.shape)}"
        )


def check_last_dim(name, tensor, expected):
    got = tensor.shape[-1]
    if got is not None and expected is not None and got != expected:
        raise ValueError(
            f"The last dimension of `{name}` must be {expected}, the size the "
            f"layer was built with. Received: {name}.shape={tuple(tensor.shape)}"
        )


def check_mask_shape(name, mask, expected_shape):
    """Checks a mask against `expected_shape`; `None` entries are not checked.

    Static dimensions must match exactly: a mask is never broadcast.
    """
    if mask is None:
        return
    shape = tuple(mask.shape)
    ok = len(shape) == len(expected_shape) and all(
        e is None or s is None or s == e
        for s, e in zip(shape, expected_shape, strict=False)
    )
    if not ok:
        wanted = tuple("?" if e is None else e for e in expected_shape)
        raise ValueError(
            f"`{name}` must have shape {wanted}. Received: {name}.shape={shape}"
        )

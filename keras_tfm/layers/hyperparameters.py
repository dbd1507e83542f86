"""The hyper-parameters the blocks and the model families share, checked once.

`TransformerBlock` (the layers) and `TransformerModel` (the backbones) take
the same arguments under the same names (`num_heads`, `activation`,
`dropout`, ...). Each argument's check is written once, in `CHECKS`, and
`store_checked` stores a constructor's arguments on the layer under their
own names, checked, so a class lists its argument names once (the order of
its `get_config`) instead of a line of checking per argument. `config_of`
reads them back for `get_config`, and `values_of` for the sublayers that
take arguments of the same names.
"""

import functools

import keras
import numpy as np

from keras_tfm.kernels.activations import ACTIVATIONS
from keras_tfm.validation import (
    NORMALIZATIONS,
    check_choice,
    check_positive_float,
    check_positive_int,
    check_rate,
)


def as_bool(name, value):
    """A flag: True or False (NumPy's, or the integers 1 and 0, too); anything
    else, e.g. the string "no", is refused rather than read as its truth value.

    >>> as_bool("use_bias", np.bool_(False))
    False
    """
    integer = isinstance(value, int | np.integer)
    if not (isinstance(value, bool | np.bool_) or integer and value in (0, 1)):
        raise ValueError(f"`{name}` must be True or False. Received: {name}={value!r}")
    return bool(value)


def one_of(choices):
    """The check that a value is one of `choices`."""
    return functools.partial(check_choice, choices=choices)


def optional(check):
    """`check`, letting None through (None: a default the layer derives)."""

    def check_optional(name, value):
        return None if value is None else check(name, value)

    return check_optional


# The check of each shared argument, by name: `check(name, value)` returns
# the value to store or raises a ValueError that quotes it. (That
# `num_key_value_heads` divides `num_heads` is `validation.check_heads`.)
CHECKS = {
    "vocabulary_size": check_positive_int,
    "num_heads": check_positive_int,
    "hidden_dim": check_positive_int,
    "intermediate_dim": check_positive_int,
    "max_sequence_length": check_positive_int,
    "head_dim": optional(check_positive_int),
    "num_key_value_heads": optional(check_positive_int),
    "activation": one_of(ACTIVATIONS),
    "dropout": check_rate,
    "inner_dropout": check_rate,
    "normalize_first": as_bool,
    "normalization": one_of(NORMALIZATIONS),
    "layer_norm_epsilon": check_positive_float,
    "use_rotary": as_bool,
    "scale_attention": as_bool,
    "query_key_norm": as_bool,
    "attention_logit_soft_cap": optional(check_positive_float),
    "sandwich_norm": as_bool,
    "rotary_max_wavelength": check_positive_float,
    "use_bias": as_bool,
}


def store_checked(layer, arguments, checks):
    """Sets `layer.<name>` to `check(name, arguments[name])` for each check.

    Args:
        layer: the layer or model being constructed.
        arguments: its constructor's arguments by name (its `locals()`).
        checks: a dict from argument names to checks, or a sequence of names
            whose checks are in `CHECKS`.

    Example:
    >>> class Holder:
    ...     pass
    >>> holder = Holder()
    >>> store_checked(holder, {"dropout": 0, "use_bias": 1}, ("dropout", "use_bias"))
    >>> holder.dropout, holder.use_bias
    (0.0, True)
    >>> store_checked(holder, {"num_heads": 0}, ("num_heads",))
    Traceback (most recent call last):
    ...
    ValueError: `num_heads` must be a positive integer. Received: num_heads=0
    """
    if not isinstance(checks, dict):
        checks = {name: CHECKS[name] for name in checks}
    for name, check in checks.items():
        setattr(layer, name, check(name, arguments[name]))


# The projections' initializers, taken by the layers that own projections.
INITIALIZERS = ("kernel_initializer", "bias_initializer")


def store_initializers(layer, arguments):
    """Sets `layer.<name>` to the Keras initializer of `arguments[name]`."""
    for name in INITIALIZERS:
        setattr(layer, name, keras.initializers.get(arguments[name]))


def values_of(layer, names):
    """`{name: layer.<name>}`: the arguments of a sublayer that shares `names`."""
    return {name: getattr(layer, name) for name in names}


def config_of(layer, names):
    """`get_config` entries: `names` as stored, then the initializers serialized.

    Example:
    >>> ffn = keras_tfm.layers.FeedForward(intermediate_dim=32)
    >>> config = config_of(ffn, ("intermediate_dim", "activation"))
    >>> config["activation"], config["bias_initializer"]["class_name"]
    ('relu', 'Zeros')
    """
    config = values_of(layer, names)
    for name in INITIALIZERS:
        config[name] = keras.initializers.serialize(getattr(layer, name))
    return config

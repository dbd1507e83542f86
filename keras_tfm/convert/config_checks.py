"""Checks of a checkpoint's config against what our models can hold.

A loader refuses, with the config key and value, a model type, option or
setting it cannot convert exactly; a saver refuses a model whose settings
the target format cannot express.
"""


def check_model_type(config, model_types, family, directory):
    """The config's `model_type`, refused unless it is one of `model_types`."""
    model_type = config.get("model_type")
    if model_type not in model_types:
        raise ValueError(
            f"Only {family} checkpoints (model_type in {list(model_types)}) are "
            f"supported. Received: model_type={model_type!r} in "
            f"{directory}/config.json"
        )
    return model_type


def config_choice(config, key, choices, default, directory):
    """`choices[config[key]]` (the key's value in our terms), or a clear error."""
    value = config.get(key, default)
    if value not in choices:
        raise ValueError(
            f"`{key}` must be one of {list(choices)}. Received: {key}={value!r} "
            f"in {directory}/config.json"
        )
    return choices[value]


def refuse_unsupported_options(config, unsupported, family, directory):
    """Raises for the first option whose value differs from its only one."""
    for key, default in unsupported.items():
        if config.get(key, default) != default:
            raise ValueError(
                f"{family} option {key}={config[key]!r} is not supported (only "
                f"{key}={default!r}). Received in {directory}/config.json"
            )


def check_format_settings(format_name, checks):
    """Raises if a model setting differs from what `format_name` can hold.

    `checks` maps each setting's name to `(wanted, got)`.
    """
    for name, (wanted, got) in checks.items():
        if got != wanted:
            raise ValueError(
                f"A {format_name} checkpoint needs {name}={wanted!r}. "
                f"Received: {name}={got!r}"
            )

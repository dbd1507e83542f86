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


def check_attributes(format_name, model, **wanted):
    """`check_format_settings` of each `name=value` in `wanted` against
    `model.<name>`, in order: e.g. `normalization="rms_norm"`."""
    checks = {name: (value, getattr(model, name)) for name, value in wanted.items()}
    check_format_settings(format_name, checks)


def check_model_class(model, model_class, argument="model"):
    """Raises unless `model` is a `model_class` (our class, to be saved)."""
    if not isinstance(model, model_class):
        raise ValueError(
            f"`{argument}` must be a keras_tfm {model_class.__name__}. Received: "
            f"{argument}={type(model).__name__}"
        )


def check_tokenizer_kind(tokenizer, accepted, kind):
    """Raises unless `accepted` (whether `tokenizer` is of the kind a format
    writes), naming the `kind` wanted and the class received."""
    if not accepted:
        raise ValueError(
            f"`tokenizer` must be {kind}. Received: "
            f"tokenizer={type(tokenizer).__name__}"
        )


def plain_attention_settings(backbone):
    """`check_format_settings` entries for formats without grouped-query
    attention or a free head size: the values in use, passed or derived."""
    attention = backbone.transformer_layers[0].self_attention
    hidden_dim, num_heads = backbone.hidden_dim, backbone.num_heads
    return {
        "head_dim": (hidden_dim // num_heads, attention.effective_head_dim),
        "num_key_value_heads": (
            num_heads,
            attention.effective_num_key_value_heads,
        ),
    }


def check_vocabulary_size(tokenizer, model, what="model"):
    """Raises if `tokenizer` and `model` disagree on the vocabulary size."""
    size = tokenizer.vocabulary_size()
    if size != model.vocabulary_size:
        raise ValueError(
            f"The tokenizer and the {what} disagree on the vocabulary size. "
            f"Received: {size} tokens and vocabulary_size={model.vocabulary_size}"
        )


def check_special_token_ids(config, tokenizer_ids, tokens, where):
    """Refuses a config.json id that is not the tokenizer's own.

    `tokenizer_ids`: {config key (e.g. "pad_token_id"): the tokenizer's id};
    a key config.json leaves out is the tokenizer's. `tokens`: how the error
    names the tokens, e.g. '"<pad>" and "</s>"'.

    Example:
    >>> check_special_token_ids({"pad_token_id": 0}, {"pad_token_id": 0},
    ...                         '"<pad>"', "config.json")
    """
    for key, tokenizer_id in tokenizer_ids.items():
        value = config.get(key, tokenizer_id)
        if value != tokenizer_id:
            raise ValueError(
                f"config.json's {key}={value!r} is not the tokenizer's id "
                f"{tokenizer_id} ({tokens}). Received in {where}"
            )

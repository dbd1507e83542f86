"""Configs written before the Backbone/Task/Preprocessor split, read today.

Encoder tasks (`EncoderClassifier`, `SentenceEncoder`, `MaskedLanguageModel`)
took `tokenizer=`: `preprocessor_from_legacy_config` rebuilds their
preprocessor from it, packing to the length the old task read.


Until then `CausalLM` and `Seq2SeqTransformer` were one flat class each:
the backbone's arguments, the head's and a `tokenizer` in one dict. Such a
config (in an old `.keras` file, or a preset's `config.json`, which stays a
flat dict of arguments) is split here into the backbone's config, the
task's own arguments and a preprocessor around the tokenizer. A nested
config passes through, except that stray backbone arguments (a preset's
overrides, e.g. `dropout=0.0`) move into its backbone.
"""

import functools
import inspect

import keras

from keras_tfm.models.tokenizer_attachment import restore_tokenizer

# Arguments of the task's base layer that both the task and its backbone keep.
_SHARED_LAYER_ARGUMENTS = ("dtype", "trainable")


@functools.cache  # read on every attribute a task forwards to its backbone
def constructor_arguments(cls):
    """The keyword arguments `cls.__init__` names (without **kwargs)."""
    parameters = inspect.signature(cls.__init__).parameters.values()
    return frozenset(
        p.name
        for p in parameters
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != "self"
    )


def split_legacy_config(task_class, config):
    """A task config with "backbone" and "preprocessor" entries.

    Args:
        task_class: the task (`CausalLM`, `Seq2SeqLM`), with its
            `backbone_class` and `preprocessor_class`.
        config: the task's config, flat (old) or nested (current).

    Returns:
        A new dict: the task's arguments, "backbone" (a serialized backbone
        or its config dict) and "preprocessor" (None or a config).
    """
    config = dict(config)
    backbone_arguments = constructor_arguments(task_class.backbone_class)
    stray = {k: config.pop(k) for k in list(config) if k in backbone_arguments}
    backbone = config.get("backbone")
    if backbone is None:
        for key in _SHARED_LAYER_ARGUMENTS:
            if key in config:
                stray.setdefault(key, config[key])
        config["backbone"] = task_class.backbone_class(**stray)
    elif stray:
        if isinstance(backbone, dict) and "config" in backbone:
            backbone = {**backbone, "config": {**backbone["config"], **stray}}
        elif isinstance(backbone, dict):
            backbone = {**backbone, **stray}
        else:
            raise ValueError(
                f"Backbone arguments {sorted(stray)} cannot change a built "
                "backbone. Received: a backbone instance and "
                f"{ {k: stray[k] for k in sorted(stray)} }"
            )
        config["backbone"] = backbone
    backbone = config["backbone"]
    if "dtype" in config and isinstance(backbone, dict) and "config" in backbone:
        # Task and backbone share one dtype policy: a task config whose dtype
        # was replaced (a float32 copy of a mixed-precision model) moves both.
        config["backbone"] = {
            **backbone,
            "config": {**backbone["config"], "dtype": config["dtype"]},
        }
    tokenizer = config.pop("tokenizer", None)
    preprocessor = config.get("preprocessor")
    if tokenizer is not None and isinstance(preprocessor, dict):
        # A tokenizer object beside a serialized preprocessor (which holds no
        # vocabulary): the preprocessor is rebuilt around that object.
        config["preprocessor"] = {
            **preprocessor,
            "config": {**preprocessor["config"], "tokenizer": tokenizer},
        }
    elif tokenizer is not None and preprocessor is None:
        backbone = config["backbone"]
        if isinstance(backbone, dict):
            backbone = keras.saving.deserialize_keras_object(backbone)
            config["backbone"] = backbone
        config["preprocessor"] = task_class.preprocessor_for(
            restore_tokenizer(tokenizer), backbone
        )
    return config


def preprocessor_from_legacy_config(config, preprocessor_class, sequence_length):
    """Replaces an old config's "tokenizer" by a "preprocessor", in place.

    Args:
        config: a task's config dict.
        preprocessor_class: the preprocessor the task reads text with.
        sequence_length: the length the old task packed texts to.

    Example:
    >>> config = {"tokenizer": None, "max_sequence_length": 8}
    >>> preprocessor_from_legacy_config(config, object, 8)
    >>> config
    {'max_sequence_length': 8, 'preprocessor': None}
    """
    if "tokenizer" not in config:
        return
    tokenizer = restore_tokenizer(config.pop("tokenizer"))
    if config.get("preprocessor") is not None:
        return
    config["preprocessor"] = (
        None
        if tokenizer is None
        else preprocessor_class(tokenizer, sequence_length=sequence_length)
    )


def flat_arguments(model):
    """A task's arguments and its backbone's in one dict, as a preset lists them.

    The backbone's config with the task's own arguments beside it (no
    "backbone", "preprocessor" or layer name), which `from_config` of the
    task reads back; a backbone's own config otherwise.

    Example:
    >>> llm = keras_tfm.models.CausalLM.from_preset("gpt_nano")
    >>> arguments = flat_arguments(llm)
    >>> arguments["num_layers"], arguments["tie_word_embeddings"]
    (3, True)
    """
    config = model.get_config()
    backbone = config.pop("backbone", None)
    config.pop("preprocessor", None)
    config.pop("name", None)
    if backbone is None:
        return config
    inner = dict(backbone["config"])
    inner.pop("name", None)
    return {**inner, **config}

"""Moving weights between a model and a converter's name -> array mapping.

Every converter turns the checkpoint's tensors into a dict from our weight
paths (`layer/sublayer/kernel`) to NumPy arrays, then `assign_weights`
checks that it covers every weight with its shape and assigns it.
"""

import numpy as np

from keras_tfm._keras_compat import deferred_variables, initialize_deferred


def require_tensors(tensors, names, what, directory):
    """Raises naming the first missing HuggingFace tensors."""
    missing = [name for name in names if name not in tensors]
    if missing:
        raise ValueError(
            f"The {what} checkpoint in {directory} lacks {len(missing)} weights, "
            f"e.g. {missing[:3]}. Received names such as {sorted(tensors)[:3]}"
        )


def refuse_unknown_tensors(tensors, known, what, directory):
    unknown = sorted(set(tensors) - set(known))
    if unknown:
        raise ValueError(
            f"The {what} checkpoint in {directory} has {len(unknown)} weights "
            f"the model has no place for, e.g. {unknown[:3]} (a task head or "
            "another architecture?)"
        )


def check_mapping(variables, weights):
    """Checks that `weights` (path -> array) gives every one of `variables`
    (path -> variable) and nothing else, each with the variable's shape."""
    if set(variables) != set(weights):
        raise ValueError(
            "The model's weights do not match the mapping. Unmapped: "
            f"{sorted(set(variables) - set(weights))[:4]}; unknown: "
            f"{sorted(set(weights) - set(variables))[:4]}"
        )
    for path, variable in variables.items():
        if tuple(variable.shape) != tuple(weights[path].shape):
            raise ValueError(
                f"Weight {path} has shape {tuple(variable.shape)} but the "
                f"checkpoint's has {tuple(weights[path].shape)}"
            )


def assign_weights(model, weights):
    """Assigns `weights` (our weight path -> array) to every weight of `model`.

    Every weight of the model must be given, with its shape.
    """
    ours = {w.path: w for w in model.weights}
    check_mapping(ours, weights)
    for path, value in weights.items():
        ours[path].assign(np.asarray(value, "float32"))


def built_with_weights(cls, config, weights, prepare=None, **arguments):
    """`cls.from_config` of `config` and `arguments` in float32, each weight
    created with its value from `weights` (our weight path -> array).

    No weight is randomly initialised first: the model is built with its
    variables deferred (`_keras_compat.deferred_variables`), then each is
    created from its array, which is dropped from `weights` once copied (a
    memory-mapped array is then unmapped). Loading SmolLM2 so no longer
    holds its 540 MB of float32 weights two or three times at the peak.

    Args:
        cls: the model class.
        config: its arguments.
        weights: our weight path -> array, for every weight the model still
            has uninitialised after `prepare` (checked as `assign_weights`
            checks); consumed.
        prepare: optional `prepare(model)`, called before the weights are
            created, e.g. to replace float matrices by int8 blocks
            (`hold_blocks`): a replaced variable is never created.
        **arguments: more `from_config` arguments (e.g. `tokenizer`).

    Returns:
        The model.

    Example:
    >>> from keras_tfm.models import CausalLM
    >>> config = dict(vocabulary_size=8, num_layers=1, num_heads=1,
    ...               hidden_dim=4, intermediate_dim=8, max_sequence_length=4)
    >>> values = model_weights(CausalLM.from_config(config))
    >>> model = built_with_weights(CausalLM, config, dict(values))
    >>> all(np.array_equal(w.numpy(), values[w.path]) for w in model.weights)
    True
    """
    with deferred_variables() as created:
        model = cls.from_config({**config, **arguments, "dtype": "float32"})
    if prepare is not None:
        prepare(model)
    live = {id(v) for v in model.variables}
    created = [v for v in created if id(v) in live]
    weight_ids = {id(w) for w in model.weights}
    deferred = {v.path: v for v in created if id(v) in weight_ids}
    check_mapping(deferred, weights)
    for variable in created:
        value = weights.pop(variable.path, None) if id(variable) in weight_ids else None
        if value is not None:
            value = np.asarray(value, variable.dtype)
        initialize_deferred(variable, value)
        del value
    return model


def model_weights(model):
    """Our weight path -> float32 NumPy array."""
    return {w.path: np.asarray(w.numpy(), "float32") for w in model.weights}

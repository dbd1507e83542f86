"""Moving weights between a model and a converter's name -> array mapping.

Every converter turns the checkpoint's tensors into a dict from our weight
paths (`layer/sublayer/kernel`) to NumPy arrays, then `assign_weights`
checks that it covers every weight with its shape and assigns it.
"""

import numpy as np


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


def assign_weights(model, weights):
    """Assigns `weights` (our weight path -> array) to every weight of `model`.

    Every weight of the model must be given, with its shape.
    """
    ours = {w.path: w for w in model.weights}
    if set(ours) != set(weights):
        raise ValueError(
            "The model's weights do not match the mapping. Unmapped: "
            f"{sorted(set(ours) - set(weights))[:4]}; unknown: "
            f"{sorted(set(weights) - set(ours))[:4]}"
        )
    for path, value in weights.items():
        if tuple(ours[path].shape) != tuple(value.shape):
            raise ValueError(
                f"Weight {path} has shape {tuple(ours[path].shape)} but the "
                f"checkpoint's has {tuple(value.shape)}"
            )
        ours[path].assign(np.asarray(value, "float32"))


def built_with_weights(cls, config, weights, **arguments):
    """`cls.from_config` of `config` and `arguments` in float32, with every
    weight assigned from `weights` (as `assign_weights`): what each loader
    returns."""
    model = cls.from_config({**config, **arguments, "dtype": "float32"})
    assign_weights(model, weights)
    return model


def model_weights(model):
    """Our weight path -> float32 NumPy array."""
    return {w.path: np.asarray(w.numpy(), "float32") for w in model.weights}

"""What every HuggingFace-directory converter reads and writes alike.

A checkpoint directory holds config.json, the weights as safetensors (one
`model.safetensors`, or shards listed by `model.safetensors.index.json`) and
tokenizer files. Pickled weights are refused: unpickling can run code.
"""

import json
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file, save_file

PICKLE_FILES = ("pytorch_model.bin", "tf_model.h5", "flax_model.msgpack")


def check_directory(directory):
    directory = Path(directory)
    if not directory.is_dir():
        raise ValueError(
            f"`directory` must be an existing folder. Received: "
            f"directory={str(directory)!r}"
        )
    return directory


def read_json(path, required=True):
    path = Path(path)
    if not path.exists():
        if required:
            raise ValueError(
                f"The checkpoint directory has no {path.name}. Received: "
                f"directory={str(path.parent)!r}"
            )
        return {}
    return parse_json(path)


def parse_json(path):
    """The JSON value in the file at `path`; a file that is not JSON is named."""
    path = Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(
            f"{path} is not valid JSON ({error}): the file is damaged or is "
            "not the checkpoint's. Download or copy it again. Received: a file "
            f"of {path.stat().st_size} bytes"
        ) from None


def load_safetensors(path):
    """`safetensors.numpy.load_file(path)`, naming a truncated or corrupt file.

    safetensors' own error ("incomplete metadata, file not fully covered")
    names no file.
    """
    from safetensors import SafetensorError

    path = Path(path)
    try:
        return load_file(str(path))
    except SafetensorError as error:
        raise ValueError(
            f"{path} is truncated or corrupt (reading it failed with: {error}); "
            "it exists, but is not a whole safetensors file. Download or copy it "
            f"again. Received: a file of {path.stat().st_size} bytes"
        ) from None


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


def write_json(path, value):
    Path(path).write_text(json.dumps(value, indent=2, ensure_ascii=False) + "\n")


def read_safetensors(directory):
    """HuggingFace name -> NumPy array, from one file or an index of shards."""
    directory = Path(directory)
    single = directory / "model.safetensors"
    index = directory / "model.safetensors.index.json"
    if single.exists():
        return load_safetensors(single)
    if index.exists():
        shards = sorted(set(read_json(index).get("weight_map", {}).values()))
        tensors = {}
        for shard in shards:
            tensors.update(load_safetensors(directory / shard))
        return tensors
    pickled = [name for name in PICKLE_FILES if (directory / name).exists()]
    hint = ""
    if pickled:
        hint = (
            f" It holds {pickled[0]}, which is refused: loading a pickled "
            "checkpoint can execute arbitrary code. Convert it once, where you "
            "trust the file, to safetensors, e.g. with transformers: "
            "`AutoModelForCausalLM.from_pretrained(directory).save_pretrained("
            "directory)`."
        )
    raise ValueError(
        "The checkpoint directory has no model.safetensors." + hint + " "
        f"Received: directory={str(directory)!r}"
    )


def write_safetensors(tensors, directory):
    tensors = {
        name: np.ascontiguousarray(value, "float32") for name, value in tensors.items()
    }
    # transformers reads only safetensors files marked as PyTorch-format.
    save_file(tensors, str(Path(directory) / "model.safetensors"), {"format": "pt"})


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


def model_weights(model):
    """Our weight path -> float32 NumPy array."""
    return {w.path: np.asarray(w.numpy(), "float32") for w in model.weights}


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

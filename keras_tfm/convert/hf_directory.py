"""The files of a HuggingFace checkpoint directory, read and written.

A checkpoint directory holds config.json, the weights as safetensors (one
`model.safetensors`, or shards listed by `model.safetensors.index.json`) and
tokenizer files. Every family's converter reads its weights through
`read_safetensors`, so each reads sharded checkpoints. Pickled weights are
refused: unpickling can run code.
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


def write_json(path, value):
    Path(path).write_text(json.dumps(value, indent=2, ensure_ascii=False) + "\n")


def read_safetensors(directory, auto_class="AutoModelForCausalLM"):
    """HuggingFace name -> NumPy array, from one file or an index of shards.

    Args:
        directory: the checkpoint folder.
        auto_class: the transformers class the error message suggests for
            converting a pickled checkpoint (e.g. "AutoModel" for an encoder).
    """
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
            f"`{auto_class}.from_pretrained(directory).save_pretrained("
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

"""`load_named_model`: the model a command names, a `.keras` file or a preset.

Example:
>>> load_named_model("gpt_tiny").name
'causal_lm'
"""

from pathlib import Path

from keras_tfm.convert.checkpoint import is_checkpoint, load_checkpoint
from keras_tfm.saving import load_model
from keras_tfm.zoo.catalogue import (
    did_you_mean,
    from_preset,
    is_folder_path,
    list_presets,
    preset_dir,
    read_source,
)


def load_named_model(reference, weights=None):
    """Another framework's checkpoint if `reference` is one (a GGUF file or
    a HuggingFace folder: `keras_tfm.convert.load_checkpoint`), a `.keras`
    file if it is a path that exists (loaded through
    `keras_tfm.saving.load_model`), a preset folder if it is the path of one
    ("./my_preset"), else a preset of the zoo.

    Args:
        reference: a checkpoint's or a file's path, a preset folder's path
            or a preset name.
        weights: "int8_blocks" loads a GGUF file's (or GGUF preset's)
            blocks as they are; otherwise the preset's own weights.

    Raises:
        ValueError: `reference` is neither, or the file is not a model.
    """
    if is_checkpoint(reference):
        return load_checkpoint(reference, weights)
    if Path(reference).is_file():
        return load_model(reference)
    if is_folder_path(reference) and Path(reference).is_dir():
        return from_preset(reference)  # its own error if it is no preset folder
    available = list_presets()
    if reference in available:
        source = read_source(preset_dir(reference))
        if weights == "int8_blocks" and (source or {}).get("loader") == "gguf_llama":
            return from_preset(reference, weights=weights)
        return from_preset(reference)
    raise ValueError(
        f"{reference!r} is neither a model file (no such model file: "
        f"{reference}) nor a preset (`keras-tfm presets` lists them)."
        + did_you_mean(reference, available)
    )

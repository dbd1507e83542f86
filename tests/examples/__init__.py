"""Tests of the scripts in examples/ (a folder of scripts, not a package)."""

import importlib.util
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load_example_module(name):
    """examples/`name`.py, imported as a fresh module named `name`."""
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

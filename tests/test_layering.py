"""The package's layers import downwards only: layers -> models -> zoo.

A module that imports the top-level package (or a higher layer) while the
package is still initializing is an import cycle that works by accident of
import order; `zoo/catalogue.py` once did.
"""

import ast
from pathlib import Path

import pytest

import keras_tfm

PACKAGE = Path(keras_tfm.__file__).parent
# The entry points may import anything.
TOP = {"keras_tfm/__init__.py", "keras_tfm/cli.py"}
# What the low layers must never import.
HIGHER = (
    "keras_tfm.convert",
    "keras_tfm.models",
    "keras_tfm.zoo",
    "keras_tfm.generation",
    "keras_tfm.training",
)
LOW = (
    "keras_tfm/layers/",
    "keras_tfm/data/",
    "keras_tfm/datasets/",
    "keras_tfm/tokenizers/",
)


def imported_modules(path):
    """Every module `path` imports, at any depth (function bodies too)."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            if node.module == "keras_tfm":
                yield from (f"keras_tfm.{alias.name}" for alias in node.names)
                yield "keras_tfm"
            else:
                yield node.module


MODULES = sorted(
    str(path.relative_to(PACKAGE.parent)) for path in PACKAGE.rglob("*.py")
)


@pytest.mark.parametrize("module", [m for m in MODULES if m not in TOP])
def test_no_module_imports_the_top_level_package(module):
    imports = set(imported_modules(PACKAGE.parent / module))
    assert "keras_tfm" not in imports


@pytest.mark.parametrize("module", [m for m in MODULES if m.startswith(LOW)])
def test_layers_and_data_never_import_models_or_the_zoo(module):
    imports = set(imported_modules(PACKAGE.parent / module))
    assert not [name for name in imports if name.startswith(HIGHER)]

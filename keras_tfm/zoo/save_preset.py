"""Writing a model as a preset folder of a catalogue."""

import json
from pathlib import Path

import keras
import numpy as np

from keras_tfm.saving import atomic_directory, atomic_save
from keras_tfm.zoo.catalogue import (
    ASSETS_DIR,
    CARD_FILE,
    CONFIG_FILE,
    PACKAGE,
    WEIGHTS_FILE,
    _layers_with,
    build_from_directory,
    check_preset_name,
)

LOAD_LINE = 'Load it with `keras_tfm.zoo.from_preset("{name}")`.'

USAGE = """## Usage

```python
>>> import keras_tfm
>>> model = keras_tfm.zoo.from_preset("{name}")
>>> {expression}
{output}
```"""

CARD = """# {name}

{description}

| | |
|---|---|
| Class | `{class_name}` |
| Parameters | {parameters:,} |
| Weights | {weights} |

{usage}

## Intended use

{intended_use}

## Training data

{training_data}

## How it was trained

```
{training_command}
```
"""


STORED_DTYPES = {"float32": "float32", "float16": "float16-rounded"}


def save_preset(
    model,
    directory,
    description,
    intended_use,
    training_data,
    training_command,
    save_weights=True,
    overwrite=False,
    verify=True,
    usage=None,
    weights_dtype="float32",
):
    """Writes `model` as a preset folder: config.json, weights, assets, card.

    The folder's name is the preset name. `config.json` holds
    `{"class_name", "config": model.get_config(), "build_config"}`; the
    weights (never the optimizer's
    state) go to `model.weights.h5`; every sub-layer with `save_assets`
    (e.g. a keras-hub tokenizer) writes to `assets/<layer name>/`; the card
    README.md states the parameter count and the given texts. With
    `verify=True` the folder is then loaded back and its weights compared.

    With `usage`, the card shows how to use the preset in two lines, as a
    doctest: loading it, then `usage` with its output, computed here on the
    preset as loaded back (the test suite runs the cards' doctests).

    With `weights_dtype="float16"` the float32 weights are stored rounded to
    float16, a file half the size; loading casts them back to the model's
    dtype. Measure the rounded model before choosing it (the verification,
    the card's usage output and the returned folder are the rounded model's).

    Args:
        model: a model whose class is registered under package "keras_tfm".
        directory: the preset folder to write, e.g. "zoo/gpt-tiny-shakespeare".
        description: one paragraph on what the model is.
        intended_use: what it is for and not for.
        training_data: the data set, its size and licence.
        training_command: the command that trained it, as run.
        save_weights: whether to write the weights (False: a config-only preset).
        overwrite: whether to replace an existing non-empty folder. The
            preset is written (and verified) in a sibling folder first, which
            replaces `directory` only once complete, so a failure leaves an
            existing folder as it was (`keras_tfm.saving.atomic_directory`).
        verify: whether to load the written preset back and compare weights.
        usage: optional one-line Python expression on `model`, e.g.
            `'model.classify("Real programmers use vi.")'`; the caller's own
            code, evaluated (like a doctest) to write its output in the card.
        weights_dtype: "float32" (as trained) or "float16" (half the file).

    Returns:
        The folder, a `pathlib.Path`.

    Example:
    >>> save_preset(model, "zoo/gpt-tiny", "A 2-layer GPT.", "Demos.",
    ...             "Tiny Shakespeare (1 MB, public domain).",
    ...             "python examples/train_gpt.py --epochs 20")
    """
    directory = Path(directory)
    name = check_preset_name(directory.name)
    registered = keras.saving.get_registered_name(type(model))
    if not registered.startswith(PACKAGE + ">"):
        raise ValueError(
            f'`model` must be of a class registered under package "{PACKAGE}". '
            f"Received: model of class {type(model).__name__} ({registered!r})"
        )
    texts = {
        "description": description,
        "intended_use": intended_use,
        "training_data": training_data,
        "training_command": training_command,
    }
    for key, text in texts.items():
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"`{key}` must be a non-empty string. Received: {text!r}")
    if usage is not None and (
        not isinstance(usage, str) or not usage.strip() or "\n" in usage.strip()
    ):
        raise ValueError(
            f"`usage` must be None or a one-line expression. Received: {usage!r}"
        )
    if weights_dtype not in STORED_DTYPES:
        raise ValueError(
            f"`weights_dtype` must be one of {sorted(STORED_DTYPES)}. "
            f"Received: weights_dtype={weights_dtype!r}"
        )
    if save_weights and not model.built:
        raise ValueError(
            "`model` must be built (called once) to save its weights. "
            f"Received: an unbuilt {type(model).__name__}"
        )
    spec = {"class_name": registered.removeprefix(PACKAGE + ">")}
    spec["config"] = model.get_config()
    # A preset follows the user's dtype policy (e.g. mixed_bfloat16) on load.
    spec["config"].pop("dtype", None)
    build_config = model.get_build_config() if model.built else None
    if build_config:
        spec["build_config"] = build_config
    try:
        config_text = json.dumps(spec, indent=2, sort_keys=True)
    except TypeError as error:
        raise ValueError(
            f"The config of `model` is not JSON-serializable: {error}"
        ) from error

    # Written and verified in a sibling folder, which replaces `directory`
    # only once complete: a failure leaves an existing preset as it was.
    with atomic_directory(directory, overwrite) as folder:
        (folder / CONFIG_FILE).write_text(config_text + "\n", encoding="utf-8")
        if save_weights:
            atomic_save(model, folder / WEIGHTS_FILE, include_optimizer=False)
            if weights_dtype == "float16":
                _store_as_float16(folder / WEIGHTS_FILE)
        for layer in _layers_with(model, "save_assets"):
            assets = folder / ASSETS_DIR / layer.name
            assets.mkdir(parents=True, exist_ok=True)
            layer.save_assets(str(assets))
        loaded = None
        if verify:
            loaded = build_from_directory(folder, load_weights=save_weights)
            if save_weights:
                _check_same_weights(model, loaded, weights_dtype, directory)
        if usage is None:
            usage_text = LOAD_LINE.format(name=name)
        else:
            # The card's doctest output is what the expression gives on the
            # preset as loaded back.
            preset = model if loaded is None else loaded
            output = eval(usage.strip(), {"model": preset})
            usage_text = USAGE.format(
                name=name, expression=usage.strip(), output=repr(output)
            )
        card = CARD.format(
            name=name,
            usage=usage_text,
            class_name=spec["class_name"],
            parameters=model.count_params() if model.built else 0,
            weights=f"{WEIGHTS_FILE} ({STORED_DTYPES[weights_dtype]} model weights "
            "only, no optimizer state)"
            if save_weights
            else "none (config only)",
            **{key: text.strip() for key, text in texts.items()},
        )
        (folder / CARD_FILE).write_text(card, encoding="utf-8")
    return directory


def _check_same_weights(model, loaded, weights_dtype, directory):
    for saved, restored in zip(model.weights, loaded.weights, strict=True):
        expected = keras.ops.convert_to_numpy(saved)
        if weights_dtype == "float16" and expected.dtype == np.float32:
            expected = expected.astype("float16").astype("float32")
        if not np.array_equal(expected, keras.ops.convert_to_numpy(restored)):
            raise ValueError(
                f"The preset written to {directory} does not reload to the "
                f"same weights (first difference: {saved.path})."
            )


def _store_as_float16(path):
    """Rewrites a Keras weights file with its float32 arrays as float16.

    Loading casts them back to the model's dtype (Keras assigns with a cast).
    """
    import h5py

    half = path.with_name(path.name + ".tmp")
    with h5py.File(path, "r") as source, h5py.File(half, "w") as target:

        def copy(name, item):
            if isinstance(item, h5py.Group):
                target.require_group(name).attrs.update(item.attrs)
            else:
                values = item[()]
                if values.dtype == np.float32:
                    values = values.astype("float16")
                target.create_dataset(name, data=values).attrs.update(item.attrs)

        target.attrs.update(source.attrs)
        source.visititems(copy)
    half.replace(path)

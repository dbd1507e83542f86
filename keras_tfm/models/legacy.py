"""Reading what the encoder tasks saved before they had preprocessors.

Until issue 36, `EncoderClassifier`, `SentenceEncoder` and
`MaskedLanguageModel` took `tokenizer=` (and the sentence encoder a
`max_sequence_length`) and read strings themselves. Their configs (in
`.keras` files and presets) hold a "tokenizer" entry and no
"preprocessor": `from_config` rebuilds the preprocessor from it, packing to
the length the old model read.

The weights keep their paths (the backbone's and the head's layers did not
move); only the tokenizer's vocabulary moved inside a `.keras` archive, from
`assets/layers/<tokenizer class>/` to
`assets/layers/<preprocessor class>/tokenizer/` (Keras names a model's
`layers` entries by their class in snake case: `word_piece_tokenizer`,
`text_classifier_preprocessor`).
`remapped_legacy_file` writes a copy of an old archive with it moved,
which `keras_tfm.saving.load_model` then loads. Presets need no remap: the
zoo finds a tokenizer's assets by its layer name.
"""

import json
import zipfile
from pathlib import Path

# Keras' own naming of saved `layers` entries, so that the paths match.
from keras.src.utils.naming import to_snake_case

from keras_tfm.models.tokenizer_attachment import restore_tokenizer

# Each old task and the snake-case class name of the preprocessor it now has.
LEGACY_TASKS = {
    "EncoderClassifier": "text_classifier_preprocessor",
    "SentenceEncoder": "text_classifier_preprocessor",
    "MaskedLanguageModel": "masked_lm_preprocessor",
}


def preprocessor_from_legacy_config(config, preprocessor_class, sequence_length):
    """Replaces an old config's "tokenizer" by a "preprocessor", in place.

    Args:
        config: a task's config dict.
        preprocessor_class: the preprocessor the task reads text with.
        sequence_length: the length the old task packed texts to.

    Example:
    >>> config = {"tokenizer": None, "max_sequence_length": 8}
    >>> preprocessor_from_legacy_config(config, object, 8)
    >>> config
    {'max_sequence_length': 8, 'preprocessor': None}
    """
    if "tokenizer" not in config:
        return
    tokenizer = restore_tokenizer(config.pop("tokenizer"))
    if config.get("preprocessor") is not None:
        return
    config["preprocessor"] = (
        None
        if tokenizer is None
        else preprocessor_class(tokenizer, sequence_length=sequence_length)
    )


def _moved_assets(archive):
    """{old prefix: new prefix} of an old encoder task's archive, or {}."""
    spec = json.loads(archive.read("config.json"))
    registered = str(spec.get("registered_name") or spec.get("class_name"))
    preprocessor = LEGACY_TASKS.get(registered.removeprefix("keras_tfm>"))
    config = spec.get("config") or {}
    tokenizer = config.get("tokenizer")
    if preprocessor is None or not isinstance(tokenizer, dict):
        return {}
    old = to_snake_case(tokenizer["class_name"].split(">")[-1])
    return {f"assets/layers/{old}/": f"assets/layers/{preprocessor}/tokenizer/"}


def remapped_legacy_file(path, directory):
    """A copy of an old encoder task's `.keras` file that loads, or None.

    Args:
        path: a `.keras` file.
        directory: where to write the copy.

    Returns:
        The copy's path, with the tokenizer's assets where the task now
        keeps them; None when `path` needs no remap.
    """
    with zipfile.ZipFile(path) as archive:
        moves = _moved_assets(archive)
        if not moves:
            return None
        target = Path(directory) / Path(path).name
        with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as copy:
            for member in archive.infolist():
                name = member.filename
                for old, new in moves.items():
                    if name.startswith(old):
                        name = new + name[len(old) :]
                copy.writestr(name, archive.read(member))
    return target

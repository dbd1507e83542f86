"""Cached LiteRT chats: one folder a model, as a command names it.

`litert/<key>/` in the cache folder (`keras_tfm.lite.user_cache`) holds what
`keras-tfm chat` needs to answer without TensorFlow:

- `decoder.tflite`: the model's cached decoding step
  (`keras_tfm.export.export_litert_decoder`, or the preset's template
  filled with its weights: `keras_tfm.lite.decoder_template`);
- `decoder.tflite.xnnpack`: its float32 weights packed for XNNPACK on this
  CPU (`keras_tfm.lite.litert_decoder`), mapped by each chat;
- `tokenizer.json`: the tokenizer's `tokenizers` pipeline, the one its
  eager calls run;
- `entry.json`: the end-of-turn id, the chat template's default system
  prompt, the buffer length, the model's default decoding settings (its
  `generation_config`, or null), and the files the model was read from
  (path, size, modification time);
- `MANIFEST`: the size and CRC-32 of each of those, written last.

Safe as the other caches are: `<key>` hashes the model's name (or its
file's absolute path), the weights mode, `FORMAT_VERSION` and the keras-tfm,
TensorFlow, Keras and ai-edge-litert versions, so another version reads
another entry; a folder whose files do not match its MANIFEST is deleted,
and one whose model files changed since is not read; either way the
TensorFlow path answers and writes the entry anew
(`keras_tfm.chat.entry_writer`). `keras-tfm cache clear` removes them all.

Example:
>>> import tempfile
>>> root = Path(tempfile.mkdtemp())
>>> entry_folder("smollm2_135m_instruct", "float32", root).parent.name
'litert'
>>> find_entry("smollm2_135m_instruct", "float32", root) is None
True
"""

import functools
import json
import shutil
from pathlib import Path

from keras_tfm.lite.user_cache import cache_directory, cache_key, verify

FORMAT_VERSION = 6
"""Bumped whenever what an entry holds, or how it is read, changes."""

WEIGHTS = ("int8", "float32")
"""An entry's decoding step: "int8" (`keras_tfm.lite.quantized_step`, written
only from a preset's step template) or "float32"."""

TEMPLATE = "litert_decoder"
"""A preset's decoding-step template (`keras_tfm.lite.decoder_template`),
in its zoo folder (`tools/make_litert_templates.py` writes it)."""

FILES = ("decoder.tflite", "decoder.tflite.xnnpack", "tokenizer.json", "entry.json")
DECODER, PACKED_WEIGHTS, TOKENIZER, ENTRY = FILES

BUFFER_LENGTH = 512
"""Positions of an entry's key/value cache: the prompt and the answer
together (SmolLM2's default system prompt and a question take about 40, the
default answer at most 256). A longer conversation takes the TensorFlow
path."""


def buffer_length(model):
    """The cache positions of `model`'s entry: `BUFFER_LENGTH`, or the
    model's whole context if it is shorter."""
    return min(BUFFER_LENGTH, model.backbone.max_sequence_length)


@functools.cache
def package_version(name):
    """The installed version of the distribution `name` ("absent" if it is
    not installed)."""
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "absent"


def litert_version():
    """ai-edge-litert's version ("absent" if it is not installed)."""
    return package_version("ai-edge-litert")


def keeps_template(reference):
    """Whether `reference` names a preset that keeps a step template (read
    without importing Keras: the launcher asks before anything loads)."""
    from importlib import resources

    if Path(reference).is_file() or Path(reference).name != str(reference):
        return False
    folder = resources.files("keras_tfm._catalogue") / str(reference) / TEMPLATE
    return folder.joinpath("template.json").is_file()


def default_weights(reference):
    """The chat's step when `--weights` is not given: "int8" for a preset
    that keeps a step template (the int8 step passes the quality gate,
    docs/benchmarks/decoding.md), "float32" for any other model."""
    return "int8" if keeps_template(reference) else "float32"


def model_reference(reference):
    """A command's model as an entry is keyed: an existing file's absolute
    path, else the preset name as given."""
    path = Path(reference)
    return str(path.resolve()) if path.is_file() else str(reference)


def entry_folder(reference, weights, root=None):
    """The entry folder of `reference` (a preset name or a `.keras` file)
    with `weights` ("float32", ...), or None if caching is off."""
    root = cache_directory() if root is None else Path(root)
    if root is None:
        return None
    quantized = weights != "float32"
    key = cache_key(
        kind="litert_chat",
        model=model_reference(reference),
        weights=weights,
        format=FORMAT_VERSION,
        litert=litert_version(),
        quantizer=package_version("ai-edge-quantizer") if quantized else None,
    )
    return root / "litert" / key


def file_identity(path):
    """`[absolute path, size, modification time in ns]` of a model file."""
    path = Path(path).resolve()
    status = path.stat()
    return [str(path), status.st_size, status.st_mtime_ns]


def _unchanged(recorded):
    try:
        return file_identity(recorded[0]) == recorded
    except (OSError, IndexError, TypeError):
        return False


def find_entry(reference, weights, root=None):
    """`(folder, entry)` of a usable entry, else None.

    A folder whose files do not match its MANIFEST (half-written, truncated,
    garbled) is deleted; one whose model files changed is left for the
    writer to replace.
    """
    folder = entry_folder(reference, weights, root)
    if folder is None or not folder.is_dir():
        return None
    if not verify(folder, FILES):
        shutil.rmtree(folder, ignore_errors=True)
        return None
    try:
        entry = json.loads((folder / ENTRY).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not all(_unchanged(recorded) for recorded in entry.get("sources", [None])):
        return None
    return folder, entry

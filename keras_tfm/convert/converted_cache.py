"""A converted checkpoint kept for the next process: config, tokenizer, weights.

Converting SmolLM2's GGUF file takes a cold process seconds: parsing its
metadata (98k vocabulary strings and merges, in Python), building the
tokenizer, dequantising 135M weights (benchmarks/cold_start.py). What the
conversion produces depends only on the file's bytes, the conversion's
settings and the code, so it is written once to the cache folder
(`keras_tfm.lite.user_cache`, under `converted/<key>`) and read back after:

- `<key>` hashes the file's SHA-256 (`user_cache.file_sha256`, hashed once
  per file version), the settings (e.g. `max_sequence_length`, the weight
  mode), `CONVERTER_VERSION` and the keras-tfm, TensorFlow and Keras
  versions: a changed file, setting or version reads another entry.
- The entry is a folder of `entry.json` (the model's arguments, the
  tokenizer's class, config, vocabulary and merges, and which `.npy` holds
  which weight) and one `.npy` per weight, memory-mapped on reading. It is
  written into a temporary folder and renamed into place
  (`saving.atomic_directory`), and sealed by a MANIFEST of sizes and CRC-32s:
  an entry whose files do not match (truncated, garbled) is deleted and the
  checkpoint converted again.

Example:
>>> import tempfile
>>> root = Path(tempfile.mkdtemp())
>>> source = root / "model.bin"
>>> _ = source.write_bytes(b"weights")
>>> read_entry(source, {"mode": "float32"}, root) is None
True
>>> write_entry(source, {"mode": "float32"}, {"arguments": {"a": 1}},
...             {"w": np.ones(3, "float32")}, root)
>>> described, weights = read_entry(source, {"mode": "float32"}, root)
>>> described["arguments"], weights["w"].tolist()
({'a': 1}, [1.0, 1.0, 1.0])
"""

import base64
import json
import shutil
from pathlib import Path

import numpy as np

from keras_tfm.kernels.trace_setting import TraceSetting
from keras_tfm.lite.user_cache import (
    cache_directory,
    cache_key,
    file_sha256,
    seal,
    verify,
)
from keras_tfm.saving import atomic_directory
from keras_tfm.tokenizers.byte_level_bpe_tokenizer import ByteLevelBPETokenizer
from keras_tfm.tokenizers.sentencepiece_bpe_tokenizer import SentencePieceBPETokenizer

CONVERTER_VERSION = 1
"""Bumped whenever a converter's output for the same file changes."""

ENTRY_FILE = "entry.json"

_writing = TraceSetting(default=True)


def without_new_entries():
    """A block in which `write_entry` writes nothing (entries are still read).

    `keras-tfm chat` loads a preset inside one when it writes its LiteRT
    entry from a template: every later chat answers from that entry, so a
    float32 copy of the weights (SmolLM2: 540 MB) would only double what
    the cache keeps for a model the chat never loads again.

    Example:
    >>> import tempfile
    >>> root = Path(tempfile.mkdtemp())
    >>> source = root / "model.bin"
    >>> _ = source.write_bytes(b"weights")
    >>> with without_new_entries():
    ...     write_entry(source, {}, {}, {"w": np.ones(3, "float32")}, root)
    >>> read_entry(source, {}, root) is None
    True
    """
    return _writing.set(False)


def entry_folder(source, settings, root=None):
    """The cache folder of `source` converted with `settings` (or None).

    `root`: the cache folder (default `cache_directory()`).
    """
    root = cache_directory() if root is None else Path(root)
    if root is None:
        return None
    key = cache_key(
        source_sha256=file_sha256(source, root),
        settings=settings,
        converter=CONVERTER_VERSION,
    )
    return root / "converted" / key[:32]


def read_entry(source, settings, root=None):
    """`(described, weights)` as `write_entry` stored them, or None.

    None when caching is off or there is no entry; an entry whose files do
    not match its MANIFEST, or that does not parse, is deleted (and None
    returned), so that the caller converts again. The weights are read-only
    memory maps.
    """
    folder = entry_folder(source, settings, root)
    if folder is None or not folder.is_dir():
        return None
    try:
        if not verify(folder):
            raise ValueError("the files do not match the MANIFEST")
        described = json.loads((folder / ENTRY_FILE).read_text(encoding="utf-8"))
        weights = {
            name: np.load(folder / file, mmap_mode="r", allow_pickle=False)
            for name, file in described.pop("weight_files").items()
        }
    except (OSError, ValueError, KeyError, AttributeError):
        shutil.rmtree(folder, ignore_errors=True)
        return None
    return described, weights


def write_entry(source, settings, described, weights, root=None):
    """Stores `described` (JSON-able dict) and `weights` (name -> array).

    Best effort: a cache that cannot be written (read-only, full disk)
    leaves no entry and raises nothing.
    """
    folder = entry_folder(source, settings, root) if _writing.get() else None
    if folder is None:
        return
    files = {name: f"{i}.npy" for i, name in enumerate(weights)}
    try:
        with atomic_directory(folder, overwrite=True) as tmp:
            for name, file in files.items():
                np.save(tmp / file, np.ascontiguousarray(weights[name]))
            entry = {**described, "weight_files": files}
            (tmp / ENTRY_FILE).write_text(json.dumps(entry), encoding="utf-8")
            seal(tmp, [ENTRY_FILE, *files.values()])
    except (OSError, ValueError):
        return


def describe_tokenizer(tokenizer):
    """A JSON-able description of a `ByteLevelBPETokenizer` (config, vocabulary
    and merges: Keras's config leaves the last two to asset files) or of a
    `SentencePieceBPETokenizer` (config and its model, base64)."""
    if isinstance(tokenizer, SentencePieceBPETokenizer):
        proto = base64.b64encode(tokenizer.proto).decode("ascii")
        return {"config": tokenizer.get_config(), "sentencepiece": proto}
    return {
        "config": tokenizer.get_config(),
        "vocabulary": dict(tokenizer.vocabulary),
        "merges": list(tokenizer.merges),
    }


def restore_tokenizer(described):
    """The tokenizer that `describe_tokenizer` described."""
    if "sentencepiece" in described:
        proto = base64.b64decode(described["sentencepiece"])
        return SentencePieceBPETokenizer.from_config(
            {**described["config"], "proto": proto}
        )
    return ByteLevelBPETokenizer.from_config(
        {
            **described["config"],
            "vocabulary": described["vocabulary"],
            "merges": described["merges"],
        }
    )

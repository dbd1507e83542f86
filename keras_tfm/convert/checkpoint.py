"""`load_checkpoint`: another framework's checkpoint, by what it is.

A GGUF file (llama.cpp, Ollama, LM Studio) goes to `load_gguf_llama`, which
dispatches on its `general.architecture`; a HuggingFace folder to the
family's `load_hf_*`, by the `model_type` of its config.json. Either comes
back as a keras-tfm task with its tokenizer attached, which every command
(`keras-tfm chat FILE.gguf`, `generate`, `serve`, `export`) takes as it
takes a preset.
"""

import json
from pathlib import Path

from keras_tfm.convert.gguf_reader import GGUF_MAGIC

# config.json `model_type` -> the loader's name in keras_tfm.convert.
HF_LOADERS = {
    "llama": "load_hf_llama",
    "mistral": "load_hf_llama",
    "qwen2": "load_hf_llama",
    "qwen3": "load_hf_llama",
    "phi3": "load_hf_llama",
    "gpt2": "load_hf_gpt2",
    "t5": "load_hf_t5",
    "marian": "load_hf_marian",
    "gemma": "load_hf_gemma",
    "gemma2": "load_hf_gemma",
}


def is_gguf_file(path):
    """Whether `path` is a file that starts with GGUF's magic bytes."""
    path = Path(path).expanduser()
    if not path.is_file():
        return False
    with open(path, "rb") as file:
        return file.read(len(GGUF_MAGIC)) == GGUF_MAGIC


def hf_model_type(path):
    """The `model_type` of a HuggingFace folder's config.json, or None where
    `path` is no such folder (a keras-tfm preset folder's config.json names
    a `class_name` instead)."""
    config = Path(path).expanduser() / "config.json"
    if not config.is_file():
        return None
    try:
        value = json.loads(config.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not isinstance(value, dict) or "class_name" in value:
        return None
    return value.get("model_type")


def is_checkpoint(path):
    """Whether `load_checkpoint` takes `path`: a GGUF file or a HuggingFace
    folder (a config.json with a `model_type`)."""
    return is_gguf_file(path) or hf_model_type(path) is not None


def load_checkpoint(path, weights=None):
    """Loads a GGUF file or a HuggingFace folder as a keras-tfm task.

    Args:
        path: a .gguf file (any `general.architecture` `load_gguf_llama`
            reads), or a HuggingFace folder whose config.json's
            `model_type` is one of `HF_LOADERS`.
        weights: "int8_blocks" keeps a GGUF file's Q8_0/Q4_0/Q4_1 blocks
            as they are (`load_gguf_llama`); otherwise float32.

    Returns:
        A `CausalLM` (or, for T5 and Marian, a `Seq2SeqLM`) with the
        checkpoint's tokenizer and chat template attached.

    Raises:
        ValueError: neither a GGUF file nor a HuggingFace folder, or a
            `model_type` no loader reads (named, with those that are).

    Example:
    >>> model = load_checkpoint(FIXTURES / "gguf" / "tiny_qwen3_q8_0.gguf")
    >>> model.query_key_norm, model.tokenizer.eos_token
    (True, '<|im_end|>')
    """
    import keras_tfm.convert as convert

    if is_gguf_file(path):
        mode = "int8_blocks" if weights == "int8_blocks" else "float32"
        return convert.load_gguf_llama(path, weights=mode)
    model_type = hf_model_type(path)
    if model_type is None:
        raise ValueError(
            f"{str(path)!r} is neither a GGUF file nor a HuggingFace folder "
            "(a config.json with a model_type)."
        )
    if model_type not in HF_LOADERS:
        raise ValueError(
            f"HuggingFace checkpoints of model_type {model_type!r} are not "
            f"supported; those of {sorted(HF_LOADERS)} are. Received: {path}"
        )
    return getattr(convert, HF_LOADERS[model_type])(Path(path).expanduser())

"""Byte-level BPE tokenizer files (GPT-2 style) <-> keras-hub tokenizers.

HuggingFace keeps a byte-level BPE as vocab.json (token -> id) and
merges.txt (one "left right" pair a line, after a "#version" line), or
inside tokenizer.json (`model.vocab`, `model.merges`, with the
normalizer and pre-tokenizer); keras-hub's `BytePairTokenizer` takes the
same vocabulary and merges, `ByteLevelBPETokenizer` the pre-tokenization.
"""

import json
from pathlib import Path

from keras_tfm.convert.hf_directory import read_json, write_json


def read_merges_txt(path):
    lines = Path(path).read_text(encoding="utf-8").split("\n")
    return [line for line in lines if line and not line.startswith("#version")]


SENTENCEPIECE_STYLE = (
    "SentencePiece-style BPE tokenizers (Llama 2, Mistral v0.1: spaces "
    "written as '\u2581', byte fallback) are not supported, only byte-level "
    "BPE (GPT-2, Llama 3, Qwen2, SmolLM)."
)


def _sentencepiece_style(spec):
    """True for a tokenizer.json of a SentencePiece BPE (Llama 2's kind)."""
    parts = [spec.get("normalizer"), spec.get("pre_tokenizer"), spec.get("decoder")]
    text = json.dumps(parts, ensure_ascii=False)
    return bool((spec.get("model") or {}).get("byte_fallback")) or any(
        sign in text for sign in ("Metaspace", "\u2581", "ByteFallback")
    )


def _pre_tokenizer_options(pre, path):
    """`ByteLevelBPETokenizer` pre-tokenizer arguments from tokenizer.json's
    `pre_tokenizer`: ByteLevel alone ("gpt2"), Digits(individual_digits)
    then ByteLevel ("smollm"), or Split(a regex, Isolated) then ByteLevel
    without its regex ("split", Llama 3 and Qwen2)."""
    pre = pre or {}
    steps = pre.get("pretokenizers") if pre.get("type") == "Sequence" else [pre]
    steps = [step or {} for step in steps or []]
    kinds = [step.get("type") for step in steps]
    last = steps[-1] if kinds and kinds[-1] == "ByteLevel" else None
    if last is not None and not last.get("add_prefix_space", False):
        if last.get("use_regex", True):
            if kinds == ["ByteLevel"]:
                return {"pre_tokenizer": "gpt2"}
            if kinds == ["Digits", "ByteLevel"] and steps[0].get("individual_digits"):
                return {"pre_tokenizer": "smollm"}
        elif kinds == ["Split", "ByteLevel"]:
            split = steps[0]
            pattern = (split.get("pattern") or {}).get("Regex")
            isolated = split.get("behavior") == "Isolated"
            if pattern is not None and isolated and not split.get("invert"):
                return {"pre_tokenizer": "split", "split_pattern": pattern}
    raise ValueError(
        "Only byte-level BPE pre-tokenizers are supported: ByteLevel (GPT-2), "
        "Digits(individual_digits) then ByteLevel (SmolLM), or Split(regex, "
        "Isolated) then ByteLevel(use_regex=False) (Llama 3, Qwen2), without "
        f"add_prefix_space. Received: pre_tokenizer={pre!r} in {path}"
    )


def tokenizer_options(spec, path):
    """`ByteLevelBPETokenizer` arguments (pre-tokenizer, split regex,
    normalizer, ignore_merges) for a parsed tokenizer.json."""
    model = spec.get("model") or {}
    if model.get("type") != "BPE":
        raise ValueError(
            "Only BPE tokenizers are supported. Received: model.type="
            f"{model.get('type')!r} in {path}"
        )
    if _sentencepiece_style(spec):
        raise ValueError(
            f"{SENTENCEPIECE_STYLE} Received: model.byte_fallback="
            f"{model.get('byte_fallback')!r}, normalizer="
            f"{spec.get('normalizer')!r}, pre_tokenizer="
            f"{spec.get('pre_tokenizer')!r} in {path}"
        )
    normalizer = spec.get("normalizer")
    if normalizer is not None and normalizer != {"type": "NFC"}:
        raise ValueError(
            "Only the NFC normalizer (Qwen2's) is supported. Received: "
            f"normalizer={normalizer!r} in {path}"
        )
    options = _pre_tokenizer_options(spec.get("pre_tokenizer"), path)
    options["normalizer"] = None if normalizer is None else "NFC"
    options["ignore_merges"] = bool(model.get("ignore_merges", False))
    return options


def read_vocab_and_merges(directory):
    """`(vocabulary, merges, special tokens, options)` of a directory.

    tokenizer.json is preferred; vocab.json with merges.txt (GPT-2's split)
    is the fallback. `options` are the `ByteLevelBPETokenizer` arguments of
    `tokenizer_options`.
    """
    directory = Path(directory)
    path = directory / "tokenizer.json"
    if path.exists():
        spec = read_json(path)
        options = tokenizer_options(spec, path)
        model = spec["model"]
        merges = [
            m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])
        ]
        vocabulary = dict(model.get("vocab", {}))
        special = []
        for token in spec.get("added_tokens", []):
            vocabulary.setdefault(token["content"], token["id"])
            if token.get("special"):
                special.append(token["content"])
        return vocabulary, merges, special, options
    for name in ("vocab.json", "merges.txt"):
        if not (directory / name).exists():
            raise ValueError(
                "The checkpoint directory has neither tokenizer.json nor "
                f"vocab.json with merges.txt (it lacks {name}). Received: "
                f"directory={str(directory)!r}"
            )
    return (
        read_json(directory / "vocab.json"),
        read_merges_txt(directory / "merges.txt"),
        [],
        {"pre_tokenizer": "gpt2"},
    )


def write_tokenizer_json(directory, tokenizer):
    """tokenizer.json for a `ByteLevelBPETokenizer`, built by `tokenizers`."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers
    from tokenizers import pre_tokenizers as pre

    vocabulary = tokenizer_vocabulary(tokenizer)
    merges = [tuple(merge.split(" ")) for merge in tokenizer.merges]
    ignore_merges = bool(getattr(tokenizer, "ignore_merges", False))
    hf = Tokenizer(
        models.BPE(vocab=vocabulary, merges=merges, ignore_merges=ignore_merges)
    )
    kind = getattr(tokenizer, "pre_tokenizer", "gpt2")
    steps = [pre.ByteLevel(add_prefix_space=False, use_regex=kind != "split")]
    if kind == "smollm":
        steps.insert(0, pre.Digits(individual_digits=True))
    elif kind == "split":
        steps.insert(0, pre.Split(Regex(tokenizer.split_pattern), "isolated"))
    hf.pre_tokenizer = steps[0] if len(steps) == 1 else pre.Sequence(steps)
    if getattr(tokenizer, "normalizer", None) == "NFC":
        hf.normalizer = normalizers.NFC()
    hf.decoder = decoders.ByteLevel()
    special = list(tokenizer.unsplittable_tokens or [])
    if special:
        hf.add_special_tokens(special)
    hf.save(str(Path(directory) / "tokenizer.json"))


def write_vocab_and_merges(directory, vocabulary, merges):
    """vocab.json and merges.txt, as GPT-2's tokenizer files are."""
    directory = Path(directory)
    write_json(directory / "vocab.json", vocabulary)
    text = "#version: 0.2\n" + "".join(merge + "\n" for merge in merges)
    (directory / "merges.txt").write_text(text, encoding="utf-8")


def tokenizer_vocabulary(tokenizer):
    """The token -> id dict of a keras-hub `BytePairTokenizer`."""
    return {token: int(i) for token, i in tokenizer.vocabulary.items()}

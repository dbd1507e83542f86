"""Byte-level BPE tokenizer files (GPT-2 style) <-> keras-hub tokenizers.

HuggingFace keeps a byte-level BPE as vocab.json (token -> id) and
merges.txt (one "left right" pair a line, after a "#version" line), or
inside tokenizer.json (`model.vocab`, `model.merges`); keras-hub's
`BytePairTokenizer` takes the same vocabulary and merges.
"""

from pathlib import Path

from keras_tfm.convert._hf_files import read_json, write_json


def read_merges_txt(path):
    lines = Path(path).read_text(encoding="utf-8").split("\n")
    return [line for line in lines if line and not line.startswith("#version")]


def _pre_tokenizer_kind(pre, path):
    """ "gpt2" or "smollm" (see `GGUFBytePairTokenizer`), from tokenizer.json."""
    pre = pre or {}
    steps = pre.get("pretokenizers") if pre.get("type") == "Sequence" else [pre]
    steps = [step or {} for step in steps or []]
    kinds = [step.get("type") for step in steps]
    byte_level = steps[-1] if kinds and kinds[-1] == "ByteLevel" else None
    if byte_level is not None and byte_level.get("use_regex", True):
        if kinds == ["ByteLevel"]:
            return "gpt2"
        if kinds == ["Digits", "ByteLevel"] and steps[0].get("individual_digits"):
            return "smollm"
    raise ValueError(
        "Only byte-level BPE tokenizers with GPT-2's split (pre_tokenizer "
        "ByteLevel) or SmolLM's (Digits(individual_digits) then ByteLevel) are "
        "supported; Llama 3's regex split and SentencePiece-style BPE (Llama "
        f"2, Mistral) are not. Received: pre_tokenizer={pre!r} in {path}"
    )


def read_vocab_and_merges(directory):
    """`(vocabulary, merges, special tokens, pre-tokenizer)` of a directory.

    tokenizer.json is preferred; vocab.json with merges.txt (GPT-2's split)
    is the fallback. The pre-tokenizer is "gpt2" or "smollm".
    """
    directory = Path(directory)
    path = directory / "tokenizer.json"
    if path.exists():
        spec = read_json(path)
        model = spec.get("model") or {}
        if model.get("type") != "BPE":
            raise ValueError(
                "Only BPE tokenizers are supported. Received: model.type="
                f"{model.get('type')!r} in {path}"
            )
        for key in ("normalizer",):
            if spec.get(key) is not None:
                raise ValueError(
                    f"Tokenizers with a {key} are not supported. Received: "
                    f"{key}={spec[key]!r} in {path}"
                )
        for key in ("ignore_merges", "byte_fallback"):
            if model.get(key):
                raise ValueError(
                    f"BPE option model.{key}=True is not supported. Received in {path}"
                )
        kind = _pre_tokenizer_kind(spec.get("pre_tokenizer"), path)
        merges = [
            m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])
        ]
        vocabulary = dict(model.get("vocab", {}))
        special = []
        for token in spec.get("added_tokens", []):
            vocabulary.setdefault(token["content"], token["id"])
            if token.get("special"):
                special.append(token["content"])
        return vocabulary, merges, special, kind
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
        "gpt2",
    )


def write_tokenizer_json(directory, tokenizer):
    """tokenizer.json for a `GGUFBytePairTokenizer`, built by `tokenizers`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    vocabulary = tokenizer_vocabulary(tokenizer)
    merges = [tuple(merge.split(" ")) for merge in tokenizer.merges]
    hf = Tokenizer(models.BPE(vocab=vocabulary, merges=merges))
    steps = [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]
    if getattr(tokenizer, "pre_tokenizer", "gpt2") == "smollm":
        steps.insert(0, pre_tokenizers.Digits(individual_digits=True))
    hf.pre_tokenizer = steps[0] if len(steps) == 1 else pre_tokenizers.Sequence(steps)
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

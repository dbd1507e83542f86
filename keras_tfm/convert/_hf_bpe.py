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


def read_vocab_and_merges(directory):
    """`(vocabulary dict, merges list, added special tokens)` of a directory.

    tokenizer.json is preferred; vocab.json with merges.txt is the fallback.
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
        pre = spec.get("pre_tokenizer") or {}
        kinds = [pre.get("type")] + [
            p.get("type") for p in pre.get("pretokenizers", []) or []
        ]
        if "ByteLevel" not in kinds:
            raise ValueError(
                "Only byte-level BPE tokenizers (GPT-2 style, pre_tokenizer "
                "ByteLevel) are supported; a SentencePiece-style BPE (Llama 2, "
                "Mistral) is not. Received: pre_tokenizer.type="
                f"{pre.get('type')!r} in {path}"
            )
        merges = [
            m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])
        ]
        vocabulary = dict(model.get("vocab", {}))
        special = []
        for token in spec.get("added_tokens", []):
            vocabulary.setdefault(token["content"], token["id"])
            if token.get("special"):
                special.append(token["content"])
        return vocabulary, merges, special
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
    )


def write_vocab_and_merges(directory, vocabulary, merges):
    """vocab.json and merges.txt, as GPT-2's tokenizer files are."""
    directory = Path(directory)
    write_json(directory / "vocab.json", vocabulary)
    text = "#version: 0.2\n" + "".join(merge + "\n" for merge in merges)
    (directory / "merges.txt").write_text(text, encoding="utf-8")


def tokenizer_vocabulary(tokenizer):
    """The token -> id dict of a keras-hub `BytePairTokenizer`."""
    return {token: int(i) for token, i in tokenizer.vocabulary.items()}

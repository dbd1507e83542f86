"""`.keras` files saved before `GGUFBytePairTokenizer` became
`ByteLevelBPETokenizer`.

A `.keras` file stores a tokenizer's class as its registered name and
module; the old ones must still resolve, to the renamed class.
"""

import zipfile

import keras

import keras_tfm  # noqa: F401  (registers the classes)
from keras_tfm.tokenizers import ByteLevelBPETokenizer
from tests.builders import causal_lm

VOCABULARY = {"<|im_end|>": 0, "a": 1, "b": 2, "ab": 3, "1": 4, "Ġ": 5}


def saved_under_the_old_name(model, path):
    """`model` saved, then its config rewritten as the first version wrote it."""
    model.save(path)
    with zipfile.ZipFile(path) as archive:
        files = {name: archive.read(name) for name in archive.namelist()}
    config = files["config.json"].decode("utf-8")
    assert "keras_tfm>ByteLevelBPETokenizer" in config
    config = config.replace(
        "keras_tfm.tokenizers.byte_level_bpe_tokenizer",
        "keras_tfm.convert.gguf_tokenizer",
    ).replace("ByteLevelBPETokenizer", "GGUFBytePairTokenizer")
    files["config.json"] = config.encode("utf-8")
    old = path.with_name("old.keras")
    with zipfile.ZipFile(old, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return old


def test_a_file_naming_the_old_class_loads_as_the_new_one(tmp_path):
    tokenizer = ByteLevelBPETokenizer(
        VOCABULARY,
        ["a b"],
        unsplittable_tokens=["<|im_end|>"],
        eos_token="<|im_end|>",
    )
    model = causal_lm(
        vocabulary_size=6, num_layers=1, num_heads=2, hidden_dim=8,
        intermediate_dim=16, max_sequence_length=16, tokenizer=tokenizer,
    )  # fmt: skip
    loaded = keras.models.load_model(
        saved_under_the_old_name(model, tmp_path / "new.keras")
    )
    assert type(loaded.tokenizer) is ByteLevelBPETokenizer
    # "ab", " " (as "Ġ"), "1", "1", "<|im_end|>": byte-level BPE with the
    # special token kept whole, worked out by hand from the vocabulary.
    assert [int(i) for i in loaded.tokenizer("ab 11<|im_end|>")] == [3, 5, 4, 4, 0]
    assert loaded.tokenizer.end_token_id == 0

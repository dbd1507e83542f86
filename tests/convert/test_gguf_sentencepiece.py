"""A GGUF file with a SentencePiece ("llama") vocabulary, as llama.cpp reads it.

The file (tests/fixtures/gguf/tiny_llama_spm_q8_0.gguf) is llama.cpp's own
conversion of a tiny random Llama whose tokenizer.model was trained by
`sentencepiece` (tools/make_gguf_spm_fixture.py); the npz beside it holds
llama.cpp's token ids for texts and chat prompts and its logits.
"""

import json
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from keras_tfm.convert import converted_cache, gguf_reader, load_gguf_llama
from keras_tfm.saving import load_model
from keras_tfm.tokenizers.sentencepiece_bpe_tokenizer import (
    CONTROL,
    NORMAL,
    UNKNOWN,
    SentencePieceBPETokenizer,
    sentencepiece_proto,
)
from tests.convert.llama_reference import llama_logits, tensors_of

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
PATH = FIXTURES / "gguf" / "tiny_llama_spm_q8_0.gguf"


@pytest.fixture(scope="module")
def llama_cpp():
    with np.load(FIXTURES / "gguf" / "tiny_llama_spm_llama_cpp.npz") as arrays:
        return dict(arrays)


@pytest.fixture(scope="module")
def model():
    return load_gguf_llama(PATH)


def texts_of(llama_cpp):
    return [str(text) for text in llama_cpp["texts"]]


def test_token_ids_are_llama_cpps(model, llama_cpp):
    # Words, whitespace runs, byte fallback (accents, CJK, emoji) and chat
    # prompts whose special tokens llama.cpp parses, with a space prefix
    # after each special token.
    tokenizer = model.tokenizer
    assert isinstance(tokenizer, SentencePieceBPETokenizer)
    for i, text in enumerate(texts_of(llama_cpp)):
        assert np.asarray(tokenizer(text)).tolist() == llama_cpp[f"ids_{i}"].tolist()
    # tf.data runs the same encoding.
    dataset = tf.data.Dataset.from_tensor_slices(texts_of(llama_cpp)).map(tokenizer)
    for i, ids in enumerate(dataset):
        assert ids.numpy().tolist() == llama_cpp[f"ids_{i}"].tolist()


def test_plain_texts_decode_to_themselves(model, llama_cpp):
    tokenizer = model.tokenizer
    plain = [t for t in texts_of(llama_cpp) if "<|" not in t and "<s>" not in t]
    for text in plain:
        assert tokenizer.detokenize(np.asarray(tokenizer(text))) == text


def test_the_files_roles_and_template(model):
    tokenizer = model.tokenizer
    assert (tokenizer.bos_token, tokenizer.eos_token) == ("<s>", "</s>")
    fixture = json.loads((FIXTURES / "chat_templates.json").read_text())["phi3.5"]
    assert tokenizer.chat_template == fixture["template"]
    for case in fixture["cases"][:2]:
        text = tokenizer.apply_chat_template(case["messages"])
        assert text == case["text"]


def test_logits_equal_the_reference_and_llama_cpp(model, llama_cpp):
    ids = llama_cpp["token_ids"]
    ours = np.asarray(model(ids))
    tensors = tensors_of(gguf_reader.open_gguf(PATH))
    for row in range(len(ids)):
        want = llama_logits(tensors, ids[row], 4, 2, 1e-5, 10000.0)
        gap = np.abs(ours[row] - want).max() / np.ptp(want)
        assert gap < 1e-5
    # llama.cpp rounds the activations to Q8_0 as well (2.7% of the range).
    theirs = llama_cpp["logits_q8_0"]
    assert np.abs(ours - theirs).max() / np.ptp(theirs) < 0.05
    assert np.mean(ours.argmax(-1) == theirs.argmax(-1)) >= 0.85


def test_the_tokenizer_survives_config_keras_file_and_cache(model, llama_cpp, tmp_path):
    tokenizer = model.tokenizer
    text = texts_of(llama_cpp)[-2]
    want = np.asarray(tokenizer(text)).tolist()
    described = converted_cache.describe_tokenizer(tokenizer)
    json.dumps(described)  # the cache keeps it as JSON
    again = converted_cache.restore_tokenizer(described)
    assert np.asarray(again(text)).tolist() == want
    assert again.get_config() == tokenizer.get_config()
    # A .keras file of the model keeps the tokenizer (its model an asset).
    model.save(tmp_path / "model.keras")
    loaded = load_model(tmp_path / "model.keras")
    assert np.asarray(loaded.tokenizer(text)).tolist() == want
    ids = llama_cpp["token_ids"][:1]
    np.testing.assert_array_equal(np.asarray(loaded(ids)), np.asarray(model(ids)))


def test_bad_vocabularies_are_refused():
    with pytest.raises(ValueError, match="exactly one unknown piece"):
        sentencepiece_proto(["a", "b"], [0, 0], [NORMAL, NORMAL])
    with pytest.raises(ValueError, match="one score and one type per piece"):
        sentencepiece_proto(["<unk>", "a"], [0], [UNKNOWN, NORMAL])
    with pytest.raises(ValueError, match="Received: 9 for piece 'a'"):
        sentencepiece_proto(["<unk>", "a"], [0, 0], [UNKNOWN, 9])
    proto = sentencepiece_proto(
        ["<unk>", "<x>", "a"], [0, 0, 0], [UNKNOWN, CONTROL, NORMAL]
    )
    with pytest.raises(ValueError, match="must be pieces of the model"):
        SentencePieceBPETokenizer(proto, unsplittable_tokens=["<y>"])

import doctest
import json
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras_hub.src.tokenizers.byte_pair_tokenizer import bytes_to_unicode

from keras_tfm.convert import GGUFBytePairTokenizer, gguf_reader
from keras_tfm.convert.gguf_llama import convert_gguf_tokenizer as llama_tokenizer
from keras_tfm.lite import chat_template
from keras_tfm.tokenizers import byte_level_bpe_tokenizer as gguf_tokenizer
from keras_tfm.tokenizers.byte_level_bpe_tokenizer import (
    LLAMA3_SPLIT_PATTERN,
    QWEN2_SPLIT_PATTERN,
)
from keras_tfm.zoo.smollm2 import smollm2_gguf_path
from tests.builders import causal_lm
from tests.convert.tiny_gguf import (
    MERGES,
    SPECIALS,
    TEMPLATE,
    tiny_vocabulary,
    write_tiny_llama,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
AB = {"a": 0, "b": 1, "ab": 2}


@pytest.fixture(scope="module")
def tiny():
    tokens = tiny_vocabulary()
    return GGUFBytePairTokenizer(
        {t: i for i, t in enumerate(tokens)},
        MERGES,
        unsplittable_tokens=SPECIALS,
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        chat_template=TEMPLATE,
    )


@pytest.fixture(scope="module")
def reference():
    return json.loads((FIXTURES / "smollm2_reference.json").read_text("utf-8"))


@pytest.fixture(scope="module")
def smollm2():
    try:
        path = smollm2_gguf_path()
    except ValueError as error:
        pytest.skip(str(error))
    return llama_tokenizer(gguf_reader.open_gguf(path))


def names(tokenizer, ids):
    return [tokenizer.id_to_token(int(i)) for i in ids]


def test_merges_apply_in_rank_order_and_digits_stand_alone(tiny):
    # By hand: h e l l o -> he l l o -> he ll o -> hell o; " world" -> Ġw o r
    # l d -> Ġw or l d -> Ġwor l d. "smollm" cuts each digit out, so the
    # space before "12" is a token of its own.
    ids = tiny("hello world 12")
    assert names(tiny, ids) == ["hell", "o", "Ġwor", "l", "d", "Ġ", "1", "2"]


def test_special_tokens_are_single_ids_and_survive_detokenize(tiny):
    text = "<|im_start|>user\nhello<|im_end|>\n"
    ids = [int(i) for i in tiny(text)]
    assert ids[0] == tiny.start_token_id == 1
    assert ids[-2] == tiny.end_token_id == 2
    assert names(tiny, ids[1:-2]) == ["u", "s", "e", "r", "Ċ", "hell", "o"]
    assert tiny.detokenize(ids) == text


def test_tf_data_path_gives_the_eager_ids(tiny):
    # keras-hub's own TensorFlow split would cut "   " at the end into two
    # tokens and join "\r\n" before a word; ours runs the eager pipeline.
    texts = ["end with spaces   ", "a\r\nb 2024", "<|im_end|> x"]
    dataset = tf.data.Dataset.from_tensor_slices(texts).map(tiny)
    for text, ids in zip(texts, dataset, strict=True):
        assert ids.numpy().tolist() == [int(i) for i in tiny(text)]
    assert names(tiny, tiny("a   "))[-1] == "ĠĠĠ"
    padded = GGUFBytePairTokenizer.from_config(
        {**tiny.get_config(), "sequence_length": 4, "pad_token": "<|im_end|>"}
    )
    padded.set_vocabulary_and_merges(tiny.vocabulary, tiny.merges)
    batch = tf.function(padded)(tf.constant(["hello", "hello world 1"]))
    assert batch.numpy().tolist() == [[261, 81, 2, 2], [261, 81, 264, 78]]
    assert np.array_equal(padded(["hello", "hello world 1"]), batch)


def test_bad_pre_tokenizer_and_template_are_refused():
    with pytest.raises(ValueError, match="pre_tokenizer='llama3'"):
        GGUFBytePairTokenizer(AB, ["a b"], pre_tokenizer="llama3")
    with pytest.raises(ValueError, match="split_pattern=None"):
        GGUFBytePairTokenizer(AB, ["a b"], pre_tokenizer="split")
    with pytest.raises(ValueError, match="split_pattern='x'"):
        GGUFBytePairTokenizer(AB, ["a b"], pre_tokenizer="gpt2", split_pattern="x")
    with pytest.raises(ValueError, match=r"not a valid regex.*split_pattern='\(\('"):
        GGUFBytePairTokenizer(AB, ["a b"], pre_tokenizer="split", split_pattern="((")
    with pytest.raises(ValueError, match="normalizer='NFKC'"):
        GGUFBytePairTokenizer(AB, ["a b"], normalizer="NFKC")
    # A template that refuses loads (the tokenizer works); chats say why.
    other = GGUFBytePairTokenizer(
        AB, ["a b"], chat_template="{{ raise_exception('no chats here') }}"
    )
    with pytest.raises(ValueError, match="refused the conversation: no chats here"):
        other.apply_chat_template("hi")
    with pytest.raises(ValueError, match="has no chat template"):
        GGUFBytePairTokenizer(AB, ["a b"]).apply_chat_template("hi")


def test_smollm2_ids_equal_transformers_on_varied_text(smollm2, reference):
    for entry in reference["texts"]:
        # Where transformers' GGUF converter drops the checkpoint's numeral
        # split (a space before "½"), the fixture also holds the ids of the
        # "smollm" pre-tokenizer, which llama.cpp and SmolLM2's own
        # tokenizer.json apply.
        want = entry.get("smollm_ids", entry["ids"])
        assert [int(i) for i in smollm2(entry["text"])] == want, entry["text"]
        assert smollm2.detokenize(want) == entry["text"]
    differing = [e for e in reference["texts"] if "smollm_ids" in e]
    assert len(differing) == 2  # only the texts with " ½" and " Ⅻ"
    # By hand: the numeral "½" (bytes C2 BD) is cut out, so " ½" is "Ġ" then
    # the merged byte pair "Â½" rather than "ĠÂ" then "½".
    assert names(smollm2, smollm2(" ½")) == ["Ġ", "Â½"]


def test_smollm2_special_ids_and_chat_template(smollm2, reference):
    assert (smollm2.start_token_id, smollm2.end_token_id) == (1, 2)
    for chat in reference["chats"]:
        ours = smollm2.apply_chat_template(
            chat["messages"], add_generation_prompt=chat["add_generation_prompt"]
        )
        assert ours == chat["text"]
    prompt = smollm2.apply_chat_template(reference["chat_answer"]["question"])
    assert [int(i) for i in smollm2(prompt)] == reference["chat_answer"]["prompt_ids"]


def test_smollm2_tf_data_path_equals_the_fixture(smollm2, reference):
    texts = [e["text"] for e in reference["texts"]]
    dataset = tf.data.Dataset.from_tensor_slices(texts).map(smollm2)
    for entry, ids in zip(reference["texts"], dataset, strict=True):
        assert ids.numpy().tolist() == entry.get("smollm_ids", entry["ids"])


def test_tokenizer_is_saved_with_the_model(tiny, tmp_path):
    model = causal_lm(
        vocabulary_size=tiny.vocabulary_size(), num_layers=1, num_heads=2,
        hidden_dim=8, intermediate_dim=16, max_sequence_length=16, tokenizer=tiny,
    )  # fmt: skip
    path = tmp_path / "model.keras"
    model.save(path)
    loaded = keras.models.load_model(path)
    text = "<|im_start|>hello world 2<|im_end|>   "
    assert isinstance(loaded.tokenizer, GGUFBytePairTokenizer)
    assert np.array_equal(loaded.tokenizer(text), tiny(text))
    assert loaded.tokenizer.apply_chat_template("hi") == tiny.apply_chat_template("hi")
    assert loaded.tokenizer.end_token_id == 2


def test_docstring_examples():
    for module in (gguf_tokenizer, chat_template):
        result = doctest.testmod(module)
        assert result.attempted > 0 and result.failed == 0


DIGITS = {"1": 0, "2": 1, "3": 2, "4": 3, "12": 4, "34": 5, "123": 6}


@pytest.mark.parametrize(
    "options, want",
    [
        # By hand. GPT-2: "1234" is one piece; merge ranks: 1 2, 3 4, 12 3.
        ({"pre_tokenizer": "gpt2"}, ["12", "34"]),
        # Llama 3: digit runs of up to three, "123" and "4" merge apart.
        (
            {"pre_tokenizer": "split", "split_pattern": LLAMA3_SPLIT_PATTERN},
            ["123", "4"],
        ),
        # Qwen2: every digit alone.
        (
            {"pre_tokenizer": "split", "split_pattern": QWEN2_SPLIT_PATTERN},
            ["1", "2", "3", "4"],
        ),
    ],
)
def test_the_split_decides_which_pieces_merge(options, want):
    tokenizer = GGUFBytePairTokenizer(DIGITS, ["1 2", "3 4", "12 3"], **options)
    assert names(tokenizer, tokenizer("1234")) == want
    assert tokenizer.detokenize(tokenizer("1234")) == "1234"


def test_ignore_merges_takes_whole_vocabulary_tokens():
    # By hand: "a b" merges first, then no "ab c" merge exists, so the
    # merges give ab, c; with ignore_merges the whole piece is a token.
    vocab = {"a": 0, "b": 1, "c": 2, "ab": 3, "bc": 4, "abc": 5}
    merges = ["a b", "b c"]
    plain = GGUFBytePairTokenizer(vocab, merges)
    assert [int(i) for i in plain("abc")] == [3, 2]
    whole = GGUFBytePairTokenizer(vocab, merges, ignore_merges=True)
    assert [int(i) for i in whole("abc")] == [5]


def test_nfc_composes_before_the_merges():
    # "e" + U+0301 (bytes CC 81) becomes "\u00e9" (bytes C3 A9, byte symbols
    # "Ã©"), one merged token, only with the NFC normalizer.
    byte_symbols = list(bytes_to_unicode()[1])
    vocab = {t: i for i, t in enumerate([*byte_symbols, "Ã©"])}
    text = "e\u0301"
    plain = GGUFBytePairTokenizer(vocab, ["Ã ©"], pre_tokenizer="gpt2")
    nfc = GGUFBytePairTokenizer(vocab, ["Ã ©"], pre_tokenizer="gpt2", normalizer="NFC")
    assert len(plain(text)) == 3 and plain.detokenize(plain(text)) == text
    assert names(nfc, nfc(text)) == ["Ã©"]
    assert nfc.detokenize(nfc(text)) == "\u00e9"


def test_split_settings_survive_get_config():
    tokenizer = GGUFBytePairTokenizer(
        DIGITS, ["1 2", "3 4", "12 3"], pre_tokenizer="split",
        split_pattern=QWEN2_SPLIT_PATTERN, normalizer="NFC", ignore_merges=True,
    )  # fmt: skip
    again = GGUFBytePairTokenizer.from_config(tokenizer.get_config())
    again.set_vocabulary_and_merges(tokenizer.vocabulary, tokenizer.merges)
    for key in ("pre_tokenizer", "split_pattern", "normalizer", "ignore_merges"):
        assert getattr(again, key) == getattr(tokenizer, key)
    assert names(again, again("1234")) == ["1", "2", "3", "4"]


@pytest.mark.parametrize(
    "pre, want",
    [
        ("llama-bpe", ("split", LLAMA3_SPLIT_PATTERN, True)),
        ("qwen2", ("split", QWEN2_SPLIT_PATTERN, False)),
        ("gpt-2", ("gpt2", None, False)),
        ("smollm", ("smollm", None, False)),
    ],
)
def test_gguf_pre_tokenizer_names(tmp_path, pre, want):
    path = tmp_path / "tiny.gguf"
    write_tiny_llama(path, pre=pre)
    tokenizer = llama_tokenizer(gguf_reader.open_gguf(path))
    got = (tokenizer.pre_tokenizer, tokenizer.split_pattern, tokenizer.ignore_merges)
    assert got == want


def test_unsupported_gguf_tokenizers_are_named(tmp_path):
    path = tmp_path / "sp.gguf"
    write_tiny_llama(path, tokenizer_model="bert")
    with pytest.raises(ValueError, match="'llama'.*tokenizer.ggml.model='bert'"):
        llama_tokenizer(gguf_reader.open_gguf(path))
    path = tmp_path / "pre.gguf"
    write_tiny_llama(path, pre="deepseek-coder")
    with pytest.raises(ValueError, match="tokenizer.ggml.pre='deepseek-coder'"):
        llama_tokenizer(gguf_reader.open_gguf(path))

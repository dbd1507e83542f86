"""Gemma 2 from a HuggingFace folder, against transformers' outputs.

tests/fixtures/tiny_gemma2_hf and tiny_gemma2_reference.npz come from
tools/make_hf_gemma_fixtures.py (transformers 5.23.0, random weights, a
SentencePiece tokenizer set up as Gemma's).
"""

import json

import numpy as np
import pytest

from keras_tfm.convert import load_checkpoint, load_hf_gemma, save_hf_gemma
from keras_tfm.models import CausalLM
from keras_tfm.models.legacy_configs import flat_arguments
from tests.convert import decoder_checks as checks

FOLDER = checks.FIXTURES / "tiny_gemma2_hf"


@pytest.fixture(scope="module")
def model():
    return load_hf_gemma(FOLDER)


@pytest.fixture(scope="module")
def reference():
    return checks.reference("gemma2")


def test_config_is_the_checkpoints(model):
    config = flat_arguments(model)
    want = dict(
        num_layers=2, num_heads=4, num_key_value_heads=2, head_dim=8,
        hidden_dim=32, intermediate_dim=64, max_sequence_length=64,
        activation="geglu_approximate", normalization="rms_norm",
        normalize_first=True, position_encoding="rotary", use_bias=False,
        tie_word_embeddings=True, scale_embeddings=True, sandwich_norm=True,
        attention_logit_soft_cap=5.0, final_logit_soft_cap=3.0,
        layer_norm_epsilon=1e-6, padding_id=None,
    )  # fmt: skip
    assert {key: config[key] for key in want} == want


def test_logits_equal_transformers(model, reference):
    checks.check_logits(model, reference)
    assert reference["keras_logits_gap"] < 1e-4
    # save_hf_gemma's folder ran the same in transformers.
    assert reference["reload_logits_gap"] < 1e-4


def test_greedy_continuation_equals_transformers(model, reference):
    checks.check_greedy(model, reference)


def test_token_ids_and_decoding_equal_transformers(model, reference):
    checks.check_decoder_tokenizer(model, reference)


def test_cache_equals_full_pass(model, reference):
    checks.check_cache_equals_full_pass(model, reference["token_ids"][:2, :10])


@pytest.mark.parametrize(
    "change",
    [
        {"attention_logit_soft_cap": None},
        {"final_logit_soft_cap": None},
        {"scale_embeddings": False},
        {"sandwich_norm": False},
    ],
)
def test_each_gemma_option_matters(model, reference, change):
    # Without any one of them the logits move by more than the tolerance.
    other = CausalLM.from_config({**flat_arguments(model), **change, "tokenizer": None})
    values = {w.path: w for w in other.weights}
    for weight in model.weights:
        if weight.path in values:
            values[weight.path].assign(weight)
    gap = np.abs(np.asarray(other(reference["token_ids"])) - reference["logits"])
    assert gap.max() > 1e-3


def test_the_query_scale_is_folded_into_the_query_projection(model, tmp_path):
    # query_pre_attn_scalar=16 with head_dim 8: the saved checkpoint states
    # head_dim instead, with the projection scaled by sqrt(8 / 16).
    saved = save_hf_gemma(model, tmp_path / "out")
    config = json.loads((saved / "config.json").read_text())
    assert (config["model_type"], config["query_pre_attn_scalar"]) == ("gemma2", 8)
    from safetensors.numpy import load_file

    original = load_file(str(FOLDER / "model.safetensors"))
    written = load_file(str(saved / "model.safetensors"))
    name = "model.layers.0.self_attn.q_proj.weight"
    np.testing.assert_allclose(
        written[name], original[name] * np.sqrt(8 / 16), rtol=1e-6
    )
    for key in original:  # every other tensor as transformers wrote it
        if "q_proj" not in key:
            np.testing.assert_allclose(written[key], original[key], atol=1e-6)
    assert sorted(written) == sorted(original)
    again = load_hf_gemma(saved)
    ids = checks.reference("gemma2")["token_ids"]
    np.testing.assert_allclose(
        np.asarray(again(ids)), np.asarray(model(ids)), atol=1e-5
    )
    assert again.tokenizer.get_config() == model.tokenizer.get_config()


def test_the_chat_template_and_dispatch(model):
    fixture = json.loads((checks.FIXTURES / "chat_templates.json").read_text())
    case = fixture["gemma2"]["cases"][0]
    assert model.tokenizer.apply_chat_template(case["messages"]) == case["text"]
    ids = np.asarray(model.tokenizer(case["text"])).tolist()
    assert model.tokenizer.token_to_id("<start_of_turn>") in ids
    assert load_checkpoint(FOLDER).sandwich_norm


@pytest.mark.parametrize(
    "edit, message",
    [
        ({"model_type": "gemma3_text"}, "model_type='gemma3_text'"),
        ({"hidden_activation": "gelu"}, "hidden_activation='gelu'"),
        ({"attention_bias": True}, "attention_bias=True"),
        ({"rope_scaling": {"type": "linear", "factor": 8.0}}, "rope_type='linear'"),
    ],
)
def test_unsupported_configs_raise(tmp_path, edit, message):
    folder = checks.copy_fixture("gemma2", tmp_path)
    checks.edit_json(folder, "config.json", **edit)
    with pytest.raises(ValueError, match=message):
        load_hf_gemma(folder)


def test_a_missing_post_norm_and_a_longer_length_raise(tmp_path):
    folder = checks.copy_fixture(
        "gemma2", tmp_path, drop="model.layers.1.post_feedforward_layernorm.weight"
    )
    with pytest.raises(ValueError, match="post_feedforward_layernorm"):
        load_hf_gemma(folder)
    with pytest.raises(ValueError, match="must not exceed"):
        load_hf_gemma(FOLDER, max_sequence_length=65)

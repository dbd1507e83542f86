import doctest

import numpy as np
import pytest
from safetensors.numpy import load_file

import keras_tfm
from keras_tfm.convert import GGUFBytePairTokenizer, load_hf_gpt2, save_hf_gpt2
from keras_tfm.convert import gpt2 as hf_gpt2
from keras_tfm.models import CausalLM
from keras_tfm.models.legacy_configs import flat_arguments
from tests.convert import decoder_checks as checks

FIXTURE = checks.FIXTURES / "tiny_gpt2_hf"


@pytest.fixture(scope="module")
def model():
    return load_hf_gpt2(FIXTURE)


@pytest.fixture(scope="module")
def reference():
    return checks.reference("gpt2")


def test_config_is_the_checkpoints(model):
    config = flat_arguments(model)
    want = dict(
        num_layers=2,
        num_heads=4,
        hidden_dim=32,
        intermediate_dim=128,
        max_sequence_length=64,
        activation="gelu_approximate",
        normalize_first=True,
        normalization="layer_norm",
        position_encoding="learned",
        use_bias=True,
        tie_word_embeddings=True,
        padding_id=None,
    )
    assert {k: config[k] for k in want} == want
    assert isinstance(model.tokenizer, GGUFBytePairTokenizer)
    assert model.tokenizer.pre_tokenizer == "gpt2"


def test_token_ids_equal_transformers(model, reference):
    checks.check_decoder_tokenizer(model, reference)


def test_logits_equal_transformers(model, reference):
    checks.check_logits(model, reference)
    # The fixture tool found the same when it made the fixture, and found the
    # directory written back by save_hf_gpt2 to run the same in transformers.
    assert reference["keras_logits_gap"] < 1e-4
    assert reference["reload_logits_gap"] < 1e-4


def test_exact_gelu_would_not_match(reference):
    # The tanh approximation matters: the same weights with exact GELU are
    # further from transformers' logits than the tolerance.
    model = load_hf_gpt2(FIXTURE)
    exact = CausalLM.from_config({**flat_arguments(model), "activation": "gelu"})
    exact.set_weights(model.get_weights())
    gap = np.abs(np.asarray(exact(reference["token_ids"])) - reference["logits"])
    assert gap.max() > 1e-4


def test_greedy_continuation_equals_transformers(model, reference):
    checks.check_greedy(model, reference)


def test_cache_equals_full_pass(model, reference):
    checks.check_cache_equals_full_pass(model, reference["token_ids"][:2, :10])


def test_save_then_load_is_exact(model, reference, tmp_path):
    folder = save_hf_gpt2(model, tmp_path / "out")
    assert sorted(p.name for p in folder.iterdir()) == [
        "config.json",
        "merges.txt",
        "model.safetensors",
        "special_tokens_map.json",
        "tokenizer_config.json",
        "vocab.json",
    ]
    loaded = load_hf_gpt2(folder)
    assert {k: v for k, v in flat_arguments(loaded).items() if k != "name"} == {
        k: v for k, v in flat_arguments(model).items() if k != "name"
    }
    checks.check_same_weights(model, loaded)
    checks.check_decoder_tokenizer(loaded, reference)
    np.testing.assert_array_equal(
        loaded(reference["token_ids"]), model(reference["token_ids"])
    )


def test_save_writes_one_fused_c_attn(model, tmp_path):
    tensors = load_file(str(save_hf_gpt2(model, tmp_path) / "model.safetensors"))
    original = hf_gpt2._standardize_names(load_file(str(FIXTURE / "model.safetensors")))
    saved = hf_gpt2._standardize_names(tensors)
    assert sorted(saved) == sorted(original)
    for name, value in original.items():
        np.testing.assert_array_equal(saved[name], value)


def test_max_sequence_length_cuts_the_position_table(reference):
    model = load_hf_gpt2(FIXTURE, max_sequence_length=20)
    assert model.max_sequence_length == 20
    checks.check_logits(model, reference)
    with pytest.raises(ValueError, match="max_sequence_length=65"):
        load_hf_gpt2(FIXTURE, max_sequence_length=65)


def test_pickled_checkpoints_are_refused(tmp_path):
    folder = checks.copy_fixture("gpt2", tmp_path)
    (folder / "model.safetensors").unlink()
    (folder / "pytorch_model.bin").write_bytes(b"not even read")
    with pytest.raises(ValueError, match="pytorch_model.bin.*execute arbitrary code"):
        load_hf_gpt2(folder)


@pytest.mark.parametrize(
    "edit, message",
    [
        ({"model_type": "gpt_neo"}, "model_type='gpt_neo'"),
        ({"activation_function": "silu"}, "activation_function='silu'"),
        ({"scale_attn_by_inverse_layer_idx": True}, "scale_attn_by_inverse_layer_idx"),
        ({"scale_attn_weights": False}, "scale_attn_weights=False"),
        ({"add_cross_attention": True}, "add_cross_attention=True"),
        ({"vocab_size": 400}, "vocab_size=400"),
        ({"n_inner": 64}, "shape"),
    ],
)
def test_unsupported_configs_raise(tmp_path, edit, message):
    folder = checks.copy_fixture("gpt2", tmp_path)
    checks.edit_json(folder, "config.json", **edit)
    with pytest.raises(ValueError, match=message):
        load_hf_gpt2(folder)


def test_missing_unknown_and_misshapen_tensors_raise(tmp_path):
    folder = checks.copy_fixture(
        "gpt2", tmp_path, drop="transformer.h.1.attn.c_attn.bias"
    )
    with pytest.raises(ValueError, match=r"lacks 1 weights.*h\.1\.attn\.c_attn\.bias"):
        load_hf_gpt2(folder)
    folder = checks.copy_fixture(
        "gpt2", tmp_path / "b", add={"score.weight": np.zeros((2, 32), "float32")}
    )
    with pytest.raises(ValueError, match="score.weight"):
        load_hf_gpt2(folder)
    bad = np.zeros((32, 90), "float32")
    folder = checks.copy_fixture(
        "gpt2", tmp_path / "c", add={"transformer.h.0.attn.c_attn.weight": bad}
    )
    with pytest.raises(ValueError, match=r"h\.0\.attn\.c_attn.*\(32, 90\)"):
        load_hf_gpt2(folder)


def test_an_untied_head_is_refused(tmp_path):
    tensors = load_file(str(FIXTURE / "model.safetensors"))
    wte = tensors["transformer.wte.weight"]
    folder = checks.copy_fixture("gpt2", tmp_path, add={"lm_head.weight": wte + 1})
    with pytest.raises(ValueError, match="lm_head.weight differs"):
        load_hf_gpt2(folder)


def test_missing_tokenizer_files_raise(tmp_path):
    folder = checks.copy_fixture("gpt2", tmp_path)
    (folder / "tokenizer.json").unlink()
    with pytest.raises(ValueError, match="lacks vocab.json"):
        load_hf_gpt2(folder)


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"normalize_first": False}, "normalize_first=False"),
        ({"normalization": "rms_norm"}, "normalization='rms_norm'"),
        ({"position_encoding": "rotary"}, "position_encoding='rotary'"),
        ({"use_bias": False}, "use_bias=False"),
        ({"tie_word_embeddings": False}, "tie_word_embeddings=False"),
        ({"num_key_value_heads": 2}, "num_key_value_heads=2"),
        ({"head_dim": 4}, "head_dim=4"),
        ({"activation": "swiglu"}, "activation='swiglu'"),
        ({"vocabulary_size": 400}, "vocabulary_size=400"),
    ],
)
def test_unsaveable_models_raise(model, tmp_path, overrides, message):
    other = CausalLM.from_config(
        {**flat_arguments(model), **overrides, "tokenizer": model.tokenizer}
    )
    with pytest.raises(ValueError, match=message):
        save_hf_gpt2(other, tmp_path)


def test_a_model_without_tokenizer_needs_one(model, tmp_path):
    config = {**flat_arguments(model), "tokenizer": None}
    with pytest.raises(ValueError, match="tokenizer=NoneType"):
        save_hf_gpt2(CausalLM.from_config(config), tmp_path)
    save_hf_gpt2(CausalLM.from_config(config), tmp_path, tokenizer=model.tokenizer)


def test_docstring_examples():
    result = doctest.testmod(
        hf_gpt2,
        extraglobs={"np": np, "keras_tfm": keras_tfm, "FIXTURES": checks.FIXTURES},
        optionflags=doctest.NORMALIZE_WHITESPACE,
    )
    assert result.attempted > 0 and result.failed == 0


def test_a_tokenizer_gpt2_files_cannot_hold_is_refused(model, tmp_path):
    config = model.tokenizer.get_config()
    split = GGUFBytePairTokenizer.from_config(
        {**config, "pre_tokenizer": "split", "split_pattern": r"\p{N}"}
    )
    split.set_vocabulary_and_merges(model.tokenizer.vocabulary, model.tokenizer.merges)
    with pytest.raises(ValueError, match="pre_tokenizer='split'"):
        save_hf_gpt2(model, tmp_path, tokenizer=split)

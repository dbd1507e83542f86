import doctest
import json

import keras
import numpy as np
import pytest
import tensorflow as tf
from safetensors.numpy import load_file

import keras_tfm
from keras_tfm.convert import (
    GGUFBytePairTokenizer,
    gguf_names,
    llama,
    load_hf_llama,
    save_hf_llama,
)
from keras_tfm.models import CausalLM
from keras_tfm.models.legacy_configs import flat_arguments
from keras_tfm.tokenizers import byte_level_bpe_tokenizer as gguf_tokenizer
from tests.convert import decoder_checks as checks

NAMES = ["llama_gqa", "llama_tied", "mistral", "qwen2", "qwen3", "phi3"]


@pytest.fixture(scope="module", params=NAMES)
def case(request):
    name = request.param
    return (
        name,
        load_hf_llama(checks.FIXTURES / f"tiny_{name}_hf"),
        checks.reference(name),
    )


def test_configs_are_the_checkpoints():
    gqa = flat_arguments(load_hf_llama(checks.FIXTURES / "tiny_llama_gqa_hf"))
    tied = flat_arguments(load_hf_llama(checks.FIXTURES / "tiny_llama_tied_hf"))
    common = dict(
        num_layers=2,
        num_heads=4,
        hidden_dim=32,
        intermediate_dim=48,
        max_sequence_length=64,
        activation="swiglu",
        normalize_first=True,
        normalization="rms_norm",
        position_encoding="rotary",
        padding_id=None,
    )
    want_gqa = dict(
        common,
        num_key_value_heads=2,
        head_dim=8,
        rotary_max_wavelength=50000.0,
        layer_norm_epsilon=1e-5,
        use_bias=False,
        tie_word_embeddings=False,
    )
    want_tied = dict(
        common,
        num_key_value_heads=1,
        head_dim=16,
        rotary_max_wavelength=100000.0,
        layer_norm_epsilon=1e-6,
        use_bias=True,
        tie_word_embeddings=True,
    )
    assert {k: gqa[k] for k in want_gqa} == want_gqa
    assert {k: tied[k] for k in want_tied} == want_tied
    # Mistral's sliding window (32) caps the length; within it nothing differs.
    mistral = load_hf_llama(checks.FIXTURES / "tiny_mistral_hf")
    assert mistral.max_sequence_length == 32
    assert mistral.rotary_max_wavelength == 10000.0
    qwen2 = load_hf_llama(checks.FIXTURES / "tiny_qwen2_hf")
    assert (qwen2.use_bias, qwen2.rotary_max_wavelength) == (True, 1e6)
    output_bias = qwen2.backbone.transformer_layers[0].self_attention.output_dense.bias
    query_bias = qwen2.backbone.transformer_layers[0].self_attention.query_dense.bias
    assert not np.asarray(output_bias).any() and np.asarray(query_bias).any()
    with pytest.raises(ValueError, match="sliding_window=32"):
        load_hf_llama(checks.FIXTURES / "tiny_mistral_hf", max_sequence_length=33)
    qwen3 = load_hf_llama(checks.FIXTURES / "tiny_qwen3_hf")
    assert (qwen3.query_key_norm, qwen3.use_bias, qwen3.head_dim) == (True, False, 8)
    assert not load_hf_llama(checks.FIXTURES / "tiny_qwen2_hf").query_key_norm
    phi3 = load_hf_llama(checks.FIXTURES / "tiny_phi3_hf")
    assert (phi3.head_dim, phi3.num_key_value_heads, phi3.intermediate_dim) == (
        8,
        2,
        64,
    )
    assert (phi3.use_bias, phi3.query_key_norm, phi3.tie_word_embeddings) == (
        False,
        False,
        False,
    )
    assert (phi3.max_sequence_length, phi3.rotary_max_wavelength) == (64, 10000.0)


def test_a_phi3_sliding_window_caps_the_length_as_mistrals(tmp_path):
    folder = checks.copy_fixture("phi3", tmp_path)
    checks.edit_json(folder, "config.json", sliding_window=16)
    assert load_hf_llama(folder).max_sequence_length == 16
    with pytest.raises(ValueError, match="sliding_window=16"):
        load_hf_llama(folder, max_sequence_length=17)
    # Within the window transformers' logits are those without one.
    checks.check_logits(load_hf_llama(folder), checks.reference("phi3"))


def test_qwen3_query_key_norms_matter():
    # Unit norm scales instead of the checkpoint's move the logits by more
    # than the tolerance: the scales are read and applied.
    model = load_hf_llama(checks.FIXTURES / "tiny_qwen3_hf")
    reference = checks.reference("qwen3")
    for weight in model.weights:
        if weight.path.endswith(("query_norm/scale", "key_norm/scale")):
            weight.assign(np.ones(weight.shape, "float32"))
    gap = np.abs(np.asarray(model(reference["token_ids"])) - reference["logits"])
    assert gap.max() > 1e-2


def test_a_qwen3_model_with_feed_forward_biases_is_refused(tmp_path):
    model = load_hf_llama(checks.FIXTURES / "tiny_qwen3_hf")
    config = {**flat_arguments(model), "use_bias": True, "tokenizer": model.tokenizer}
    biased = CausalLM.from_config(config)
    save_hf_llama(biased, tmp_path / "zeros")  # zero biases: a Qwen3 without
    for weight in biased.weights:
        if weight.path.endswith("feed_forward/intermediate/bias"):
            weight.assign(np.ones(weight.shape, "float32"))
    with pytest.raises(ValueError, match=r"no feed-forward biases.*mlp\.gate_proj"):
        save_hf_llama(biased, tmp_path / "out")


def test_token_ids_equal_transformers(case):
    _, model, reference = case
    checks.check_decoder_tokenizer(model, reference)


def test_logits_equal_transformers(case):
    _, model, reference = case
    checks.check_logits(model, reference)
    assert reference["keras_logits_gap"] < 1e-4
    # The directory written back by save_hf_llama ran the same in transformers.
    assert reference["reload_logits_gap"] < 1e-4


def test_greedy_continuation_equals_transformers(case):
    _, model, reference = case
    checks.check_greedy(model, reference)


def test_cache_equals_full_pass(case):
    _, model, reference = case
    checks.check_cache_equals_full_pass(model, reference["token_ids"][:2, :10])


def test_rope_base_matters(case):
    # With another base the logits move by more than the tolerance.
    _, model, reference = case
    base = 2 * model.rotary_max_wavelength
    other = CausalLM.from_config(
        {**flat_arguments(model), "rotary_max_wavelength": base, "tokenizer": None}
    )
    other.set_weights(model.get_weights())
    gap = np.abs(np.asarray(other(reference["token_ids"])) - reference["logits"])
    assert gap.max() > 1e-3


def unnamed(config):
    """`config` without its "name" entries, at every depth."""
    if isinstance(config, dict):
        return {k: unnamed(v) for k, v in config.items() if k != "name"}
    if isinstance(config, list | tuple):
        return [unnamed(v) for v in config]
    return config


def test_save_then_load_is_exact(case, tmp_path):
    name, model, reference = case
    folder = save_hf_llama(model, tmp_path / "out")
    loaded = load_hf_llama(folder)
    # Layer names are numbered per process ("tokenizer_3"): compare without.
    assert unnamed(flat_arguments(loaded)) == unnamed(flat_arguments(model))
    checks.check_same_weights(model, loaded)
    checks.check_decoder_tokenizer(loaded, reference)
    # The same tensors as transformers wrote, under the same names.
    saved = load_file(str(folder / "model.safetensors"))
    original = load_file(str(checks.FIXTURES / f"tiny_{name}_hf" / "model.safetensors"))
    if model.tie_word_embeddings:
        original.pop("lm_head.weight", None)
    # A Phi-3 is written as a Llama (its fused tensors split).
    expected_type = "qwen3" if name == "qwen3" else "llama"
    assert json.loads((folder / "config.json").read_text())["model_type"] == (
        expected_type
    )
    if name == "qwen2":
        # Written as a Llama with every bias; Qwen2 lacks these (zeros).
        extra = sorted(set(saved) - set(original))
        assert len(extra) == 4 * model.num_layers
        assert all(not saved[key].any() for key in extra)
        saved = {key: saved[key] for key in original}
    if name == "phi3":
        original = split_as_phi3_does(original, name)
    assert sorted(saved) == sorted(original)
    for key, value in original.items():
        np.testing.assert_array_equal(saved[key], value)


def split_as_phi3_does(tensors, name):
    """`tensors` with each fused Phi-3 tensor replaced by its parts, sliced
    as transformers' Phi3Attention and Phi3MLP slice their outputs."""
    hf = json.loads((checks.FIXTURES / f"tiny_{name}_hf" / "config.json").read_text())
    head_dim = hf["hidden_size"] // hf["num_attention_heads"]
    query = hf["num_attention_heads"] * head_dim
    key = hf["num_key_value_heads"] * head_dim
    inner = hf["intermediate_size"]
    tensors = dict(tensors)
    for i in range(hf["num_hidden_layers"]):
        p = f"model.layers.{i}."
        qkv = tensors.pop(p + "self_attn.qkv_proj.weight")
        assert qkv.shape[0] == query + 2 * key
        tensors[p + "self_attn.q_proj.weight"] = qkv[:query]
        tensors[p + "self_attn.k_proj.weight"] = qkv[query : query + key]
        tensors[p + "self_attn.v_proj.weight"] = qkv[query + key :]
        gate_up = tensors.pop(p + "mlp.gate_up_proj.weight")
        assert gate_up.shape[0] == 2 * inner
        tensors[p + "mlp.gate_proj.weight"] = gate_up[:inner]  # chunk(2): gate first
        tensors[p + "mlp.up_proj.weight"] = gate_up[inner:]
    return tensors


def test_mapping_round_trips_on_its_own(case):
    # llama_weights and hf_llama_tensors are inverse (the GGUF loader reuses
    # llama_weights after renaming its tensors).
    _, model, _ = case
    attention = model.backbone.transformer_layers[0].self_attention
    config = {
        **flat_arguments(model),
        "head_dim": attention.effective_head_dim,
        "num_key_value_heads": attention.effective_num_key_value_heads,
    }
    ours = {w.path: w.numpy() for w in model.weights}
    back = llama.convert_weights(llama.hf_llama_tensors(ours, config), config)
    assert sorted(back) == sorted(ours)
    for key, value in ours.items():
        np.testing.assert_array_equal(back[key], value)


SPECIAL_TOKENS = {
    "llama_gqa": ("<|begin_of_text|>", "<|end_of_text|>"),
    "llama_tied": ("<|im_start|>", "<|im_end|>"),
    "mistral": ("<|im_start|>", "<|im_end|>"),
    "qwen2": (None, "<|im_end|>"),
    "qwen3": (None, "<|im_end|>"),
    "phi3": (None, "<|endoftext|>"),
}


def test_tokenizer_special_tokens(case):
    name, model, reference = case
    tokenizer = model.tokenizer
    bos, eos = SPECIAL_TOKENS[name]
    assert (tokenizer.bos_token, tokenizer.eos_token) == (bos, eos)
    ids = np.asarray(tokenizer(f"hi{eos}")).tolist()
    assert ids[-1] == tokenizer.end_token_id
    # Llama 3's post-processor prepends the BOS; ours does not (documented).
    added = [reference[f"added_ids_{i}"][0] for i in range(len(reference["texts"]))]
    bos_id = getattr(tokenizer, "start_token_id", None)
    if name == "llama_gqa":
        assert set(added) == {bos_id}
    else:
        assert bos_id not in added


@pytest.mark.parametrize(
    "name, pattern, normalizer, ignore_merges",
    [
        ("llama_gqa", gguf_tokenizer.LLAMA3_SPLIT_PATTERN, None, True),
        ("qwen2", gguf_tokenizer.QWEN2_SPLIT_PATTERN, "NFC", False),
    ],
)
def test_regex_split_tokenizers(name, pattern, normalizer, ignore_merges):
    # The fixtures carry Meta's Llama 3 split and transformers' Qwen2 split:
    # the patterns the GGUF names "llama-bpe" and "qwen2" stand for.
    tokenizer = load_hf_llama(checks.FIXTURES / f"tiny_{name}_hf").tokenizer
    assert (tokenizer.pre_tokenizer, tokenizer.split_pattern) == ("split", pattern)
    assert (tokenizer.normalizer, tokenizer.ignore_merges) == (
        normalizer,
        ignore_merges,
    )
    # Each setting matters: GPT-2's split, or no NFC, misses the reference.
    reference = checks.reference(name)
    config = tokenizer.get_config()
    changed = [{"pre_tokenizer": "gpt2", "split_pattern": None}]
    if normalizer:
        changed.append({"normalizer": None})
    for change in changed:
        other = GGUFBytePairTokenizer.from_config({**config, **change})
        other.set_vocabulary_and_merges(tokenizer.vocabulary, tokenizer.merges)
        texts = [str(text) for text in reference["texts"]]
        differ = [
            text
            for i, text in enumerate(texts)
            if np.asarray(other(text)).tolist() != reference[f"ids_{i}"].tolist()
        ]
        assert differ, change
    # tf.data runs the same pipeline.
    texts = [str(text) for text in reference["texts"]]
    dataset = tf.data.Dataset.from_tensor_slices(texts).map(tokenizer)
    for i, ids in enumerate(dataset):
        assert ids.numpy().tolist() == reference[f"ids_{i}"].tolist()


@pytest.mark.parametrize(
    "edit, message",
    [
        ({"model_type": "gemma"}, "model_type='gemma'"),
        ({"model_type": "qwen2", "use_sliding_window": True}, "use_sliding_window"),
        ({"hidden_act": "gelu"}, "hidden_act='gelu'"),
        (
            {"rope_parameters": {"rope_type": "llama3", "rope_theta": 5e5}},
            "rope_parameters.rope_type='llama3'",
        ),
        ({"rope_scaling": {"type": "linear", "factor": 2.0}}, "rope_type='linear'"),
        ({"attention_bias": True, "mlp_bias": False}, "lacks 8 weights"),
        ({"pretraining_tp": 2}, "pretraining_tp=2"),
        ({"vocab_size": 400}, "vocab_size=400"),
        ({"intermediate_size": 40}, "shape"),
        ({"num_key_value_heads": 4}, "shape"),
    ],
)
def test_unsupported_configs_raise(tmp_path, edit, message):
    folder = checks.copy_fixture("llama_gqa", tmp_path)
    checks.edit_json(folder, "config.json", **edit)
    with pytest.raises(ValueError, match=message):
        load_hf_llama(folder)


LONGROPE = {
    "rope_type": "longrope",
    "rope_theta": 10000.0,
    "short_factor": [1.0] * 4,
    "long_factor": [2.0] * 4,
    "original_max_position_embeddings": 32,
}
SU = {key: value for key, value in LONGROPE.items() if key != "rope_type"}


@pytest.mark.parametrize(
    "edit, message",
    [
        # Phi-4-mini's RoPE over three quarters of each head, as older
        # configs write it and as transformers 5 does.
        ({"partial_rotary_factor": 0.75}, r"partial_rotary_factor=0\.75"),
        (
            {"rope_parameters": {"rope_type": "default", "rope_theta": 1e4,
                                 "partial_rotary_factor": 0.75}},
            r"rope_parameters\.partial_rotary_factor=0\.75",
        ),
        # Phi-3-128k's and Phi-3.5's LongRoPE, and its older name "su".
        ({"rope_parameters": LONGROPE}, "rope_parameters.rope_type='longrope'"),
        ({"rope_scaling": {**SU, "type": "su"}}, "rope_scaling.rope_type='su'"),
        ({"hidden_act": "gelu"}, "hidden_act='gelu'"),
    ],
)  # fmt: skip
def test_unsupported_phi3_configs_raise(tmp_path, edit, message):
    folder = checks.copy_fixture("phi3", tmp_path)
    checks.edit_json(folder, "config.json", **edit)
    with pytest.raises(ValueError, match=message):
        load_hf_llama(folder)


def test_phi3_fused_tensors_are_checked(tmp_path):
    qkv = "model.layers.1.self_attn.qkv_proj.weight"
    folder = checks.copy_fixture("phi3", tmp_path / "a", drop=qkv)
    with pytest.raises(ValueError, match=f"lacks {qkv}"):
        load_hf_llama(folder)
    folder = checks.copy_fixture(
        "phi3", tmp_path / "b", add={qkv: np.zeros((60, 32), "float32")}
    )
    with pytest.raises(ValueError, match=rf"{qkv} .* 64 rows \(32 \+ 16 \+ 16\)"):
        load_hf_llama(folder)
    folder = checks.copy_fixture(
        "phi3", tmp_path / "c",
        add={"model.layers.0.mlp.up_proj.weight": np.zeros((64, 32), "float32")},
    )  # fmt: skip
    with pytest.raises(ValueError, match=r"both .*gate_up_proj.* and .*up_proj"):
        load_hf_llama(folder)


def test_missing_and_unknown_tensors_raise(tmp_path):
    folder = checks.copy_fixture("llama_gqa", tmp_path, drop="lm_head.weight")
    with pytest.raises(ValueError, match=r"lacks 1 weights.*lm_head\.weight"):
        load_hf_llama(folder)
    folder = checks.copy_fixture(
        "llama_gqa", tmp_path / "b", drop="model.layers.1.mlp.up_proj.weight"
    )
    with pytest.raises(ValueError, match=r"model\.layers\.1\.mlp\.up_proj\.weight"):
        load_hf_llama(folder)
    folder = checks.copy_fixture(
        "llama_gqa", tmp_path / "c", add={"score.weight": np.zeros((2, 32), "f4")}
    )
    with pytest.raises(ValueError, match="score.weight"):
        load_hf_llama(folder)


def test_a_qwen2_checkpoint_with_an_output_bias_raises(tmp_path):
    bias = {"model.layers.0.self_attn.o_proj.bias": np.ones(32, "float32")}
    folder = checks.copy_fixture("qwen2", tmp_path, add=bias)
    with pytest.raises(ValueError, match=r"no model\.layers\.0\.self_attn\.o_proj"):
        load_hf_llama(folder)


def test_a_tied_checkpoint_with_a_different_head_raises(tmp_path):
    tensors = load_file(
        str(checks.FIXTURES / "tiny_llama_tied_hf" / "model.safetensors")
    )
    head = tensors["model.embed_tokens.weight"] + 1
    folder = checks.copy_fixture("llama_tied", tmp_path, add={"lm_head.weight": head})
    with pytest.raises(ValueError, match="lm_head.weight that differs"):
        load_hf_llama(folder)


# tokenizer.json parts of SentencePiece-style BPE checkpoints: Llama 2's
# (spaces replaced by "\u2581" in a normalizer, byte fallback) and Mistral
# v0.1's as transformers writes it now (a Metaspace pre-tokenizer).
LLAMA2_STYLE = dict(
    normalizer={
        "type": "Sequence",
        "normalizers": [
            {"type": "Prepend", "prepend": "\u2581"},
            {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"},
        ],
    },
    pre_tokenizer=None,
)
MISTRAL_V01_STYLE = dict(
    normalizer=None,
    pre_tokenizer={"type": "Metaspace", "replacement": "\u2581", "split": False},
)


@pytest.mark.parametrize(
    "edit, message",
    [
        (LLAMA2_STYLE, "SentencePiece-style BPE.*Llama 2"),
        (MISTRAL_V01_STYLE, "SentencePiece-style BPE.*Metaspace"),
        ({"normalizer": {"type": "Lowercase"}}, "NFC normalizer.*Lowercase"),
        (
            {"pre_tokenizer": {"type": "Split", "pattern": {"Regex": "a"}}},
            "byte-level BPE pre-tokenizers.*'Split'",
        ),
    ],
)
def test_unsupported_tokenizers_raise(tmp_path, edit, message):
    folder = checks.copy_fixture("llama_gqa", tmp_path)
    checks.edit_json(folder, "tokenizer.json", **edit)
    with pytest.raises(ValueError, match=message):
        load_hf_llama(folder)


def test_byte_fallback_is_refused_and_a_missing_tokenizer_named(tmp_path):
    folder = checks.copy_fixture("llama_gqa", tmp_path)
    spec = json.loads((folder / "tokenizer.json").read_text())
    spec["model"]["byte_fallback"] = True
    (folder / "tokenizer.json").write_text(json.dumps(spec))
    with pytest.raises(ValueError, match="SentencePiece-style.*byte_fallback=True"):
        load_hf_llama(folder)
    (folder / "tokenizer.json").unlink()
    with pytest.raises(ValueError, match="neither tokenizer.json"):
        load_hf_llama(folder)


def test_pickled_checkpoints_are_refused(tmp_path):
    folder = checks.copy_fixture("llama_gqa", tmp_path)
    (folder / "model.safetensors").unlink()
    (folder / "pytorch_model.bin").write_bytes(b"not even read")
    with pytest.raises(ValueError, match="pytorch_model.bin.*execute arbitrary code"):
        load_hf_llama(folder)


def test_sharded_checkpoints_load(tmp_path):
    folder = checks.shard_safetensors(checks.copy_fixture("llama_gqa", tmp_path))
    reference = checks.reference("llama_gqa")
    checks.check_logits(load_hf_llama(folder), reference)


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"normalize_first": False}, "normalize_first=False"),
        ({"normalization": "layer_norm"}, "normalization='layer_norm'"),
        ({"position_encoding": "learned"}, "position_encoding='learned'"),
        ({"activation": "gelu"}, "activation='gelu'"),
        ({"vocabulary_size": 400}, "vocabulary_size=400"),
    ],
)
def test_unsaveable_models_raise(case, tmp_path, overrides, message):
    _, model, _ = case
    other = CausalLM.from_config(
        {**flat_arguments(model), **overrides, "tokenizer": model.tokenizer}
    )
    with pytest.raises(ValueError, match=message):
        save_hf_llama(other, tmp_path)


def test_docstring_examples():
    result = checks.run_docstring_examples(
        [llama.load_hf_llama, llama.save_hf_llama],
        {"np": np, "keras_tfm": keras_tfm, "FIXTURES": checks.FIXTURES},
    )
    assert result.attempted > 0 and result.failed == 0


def test_gguf_names_map_onto_the_same_mapping():
    # Every HuggingFace name of a two-layer untied Llama has one GGUF name,
    # and the others are Qwen2's q/k/v biases and Qwen3's q/k norms.
    config = {"num_layers": 2, "use_bias": False, "tie_word_embeddings": False}
    gguf = ["token_embd.weight", "output_norm.weight", "output.weight"]
    for i in range(2):
        table = gguf_names.GGUF_TO_HF
        gguf += [key.replace("{i}", str(i)) for key in table if "{i}" in key]
    hf = {gguf_names.hf_name_from_gguf(name) for name in gguf}
    llama_names = set(llama.llama_hf_names(config))
    assert llama_names <= hf
    assert {name.split(".", 3)[-1] for name in hf - llama_names} == {
        f"self_attn.{leaf}"
        for leaf in ("q_proj.bias", "k_proj.bias", "v_proj.bias",
                     "q_norm.weight", "k_norm.weight")
    }  # fmt: skip
    with pytest.raises(ValueError, match="'blk.0.attn_qkv.weight'"):
        gguf_names.hf_name_from_gguf("blk.0.attn_qkv.weight")


def test_phi3_gguf_names_are_its_fused_tensors():
    # A Phi-3 file's names cover the fused HuggingFace tensors, each once;
    # its ffn_up is the gate-up tensor, a Llama file's the up projection.
    config = dict(
        num_layers=2, use_bias=False, tie_word_embeddings=False, hidden_dim=32,
        intermediate_dim=64, num_heads=4, head_dim=8, num_key_value_heads=2,
        vocabulary_size=320,
    )  # fmt: skip
    hf = set(llama.phi3_hf_shapes(config))
    gguf = {gguf_names.gguf_name_from_hf(name, "phi3") for name in hf}
    assert len(gguf) == len(hf)
    assert {gguf_names.hf_name_from_gguf(name, "phi3") for name in gguf} == hf
    assert {"blk.1.attn_qkv.weight", "blk.1.ffn_up.weight"} <= gguf
    assert gguf_names.hf_name_from_gguf("blk.1.ffn_up.weight") == (
        "model.layers.1.mlp.up_proj.weight"
    )
    assert llama.phi3_hf_shapes(config)["model.layers.1.mlp.gate_up_proj.weight"] == (
        128,
        32,
    )


def test_llama_mapping_docstring_examples():
    result = doctest.testmod(gguf_names, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0


@pytest.mark.parametrize("untied", [False, True])
def test_the_gguf_loader_goes_through_this_mapping(tmp_path, untied, monkeypatch):
    # The GGUF loader hands llama.convert_weights the file's tensors under
    # HuggingFace names: renamed by hand here, q/k rows un-permuted.
    from keras_tfm.convert import gguf_llama
    from tests.convert.tiny_gguf import Q, write_tiny_llama

    path = tmp_path / "tiny.gguf"
    stored = write_tiny_llama(
        path, untied=untied, linear_type=Q.F32, embedding_type=Q.F32
    )
    renamed = {"token_embd": "model.embed_tokens", "output_norm": "model.norm"}
    renamed["output"] = "lm_head"
    layer = {
        "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
        "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
        "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
        "ffn_down": "mlp.down_proj", "attn_norm": "input_layernorm",
        "ffn_norm": "post_attention_layernorm",
    }  # fmt: skip
    want = {}
    for name, value in stored.items():
        parts = name.split(".")
        if parts[0] == "blk":
            hf = f"model.layers.{parts[1]}.{layer[parts[2]]}.weight"
        else:
            hf = f"{renamed[parts[0]]}.weight"
        if parts[-2] in ("attn_q", "attn_k"):
            heads = 4 if parts[-2] == "attn_q" else 2
            value = gguf_names.unpermute_rows(value, heads)
        want[hf] = value
    seen = []
    real = llama.convert_weights

    def spy(tensors, config, source="the checkpoint"):
        seen.append(tensors)
        return real(tensors, config, source)

    monkeypatch.setattr(gguf_llama, "convert_weights", spy)
    model = gguf_llama.load_gguf_llama(path)
    (tensors,) = seen
    assert sorted(tensors) == sorted(want)
    for key, value in want.items():
        np.testing.assert_array_equal(tensors[key], value)
    embedding = model.backbone.get_layer("token_embedding").embeddings.numpy()
    np.testing.assert_array_equal(embedding, stored["token_embd.weight"])


def test_built_with_weights_never_runs_an_initializer_and_consumes_the_mapping(
    monkeypatch,
):
    from keras_tfm.convert.weights import built_with_weights, model_weights
    from keras_tfm.models import CausalLM

    config = dict(
        vocabulary_size=8, num_layers=1, num_heads=1, hidden_dim=4,
        intermediate_dim=8, max_sequence_length=4,
    )  # fmt: skip
    values = model_weights(CausalLM.from_config(config))
    values = {path: value + 1.0 for path, value in values.items()}
    mapping = dict(values)
    ran = []
    for cls in vars(keras.initializers).values():  # every one that computes
        if isinstance(cls, type) and "__call__" in vars(cls):
            monkeypatch.setattr(
                cls, "__call__", lambda self, *a, _o=cls.__call__, **k:
                ran.append(self) or _o(self, *a, **k),
            )  # fmt: skip
    model = built_with_weights(CausalLM, config, mapping)
    assert ran == [] and mapping == {}
    for weight in model.weights:
        np.testing.assert_array_equal(weight.numpy(), values[weight.path])
    with pytest.raises(ValueError, match="Unmapped"):
        built_with_weights(CausalLM, config, {})

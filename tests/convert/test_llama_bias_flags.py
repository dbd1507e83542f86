"""Llama configs whose `attention_bias` and `mlp_bias` differ (both valid in
transformers) load, with the biases the checkpoint lacks as zeros.

The expected logits come from a float64 NumPy forward pass of transformers'
Llama written here from its formulas, over the checkpoint's tensors as
HuggingFace stores them: RMSNorm, q/k/v/o projections with optional biases,
RoPE on the two halves of each head (`rotate_half`), grouped-query causal
attention, SwiGLU with optional biases.
"""

import json

import numpy as np
import pytest
from safetensors.numpy import load_file

from keras_tfm.convert import load_hf_llama, save_hf_llama
from tests.convert import decoder_checks as checks
from tests.convert.llama_reference import rms_norm

ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP = ("gate_proj", "up_proj", "down_proj")
TOKEN_IDS = np.array([[5, 17, 200, 3, 99, 42, 7, 300]])


def rope_halves(x, base):
    """x: (seq, heads, d); transformers' rotate_half form of RoPE."""
    seq, _, dim = x.shape
    frequencies = base ** (-np.arange(0, dim, 2) / dim)  # (d / 2,)
    angles = np.arange(seq)[:, None] * frequencies
    angles = np.concatenate([angles, angles], axis=-1)[:, None, :]  # (seq, 1, d)
    rotated = np.concatenate([-x[..., dim // 2 :], x[..., : dim // 2]], axis=-1)
    return x * np.cos(angles) + rotated * np.sin(angles)


def hf_llama_logits(tensors, token_ids, config):
    """float64 logits (seq, vocabulary) of one sequence."""

    def w(name):
        return tensors[name].astype("float64")

    def linear(x, name):
        out = x @ w(name + ".weight").T
        return out + w(name + ".bias") if name + ".bias" in tensors else out

    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    head_dim, epsilon = config["head_dim"], config["rms_norm_eps"]
    base = config["rope_parameters"]["rope_theta"]
    h = w("model.embed_tokens.weight")[np.asarray(token_ids)]
    seq = len(token_ids)
    causal = np.triu(np.full((seq, seq), -np.inf), k=1)
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        x = rms_norm(h, w(p + "input_layernorm.weight"), epsilon)
        q = linear(x, p + "self_attn.q_proj").reshape(seq, heads, head_dim)
        k = linear(x, p + "self_attn.k_proj").reshape(seq, kv_heads, head_dim)
        v = linear(x, p + "self_attn.v_proj").reshape(seq, kv_heads, head_dim)
        q, k = rope_halves(q, base), rope_halves(k, base)
        outputs = []
        for head in range(heads):
            kv = head // (heads // kv_heads)
            scores = q[:, head] @ k[:, kv].T / np.sqrt(head_dim) + causal
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            outputs.append(scores / scores.sum(-1, keepdims=True) @ v[:, kv])
        h = h + linear(np.concatenate(outputs, -1), p + "self_attn.o_proj")
        x = rms_norm(h, w(p + "post_attention_layernorm.weight"), epsilon)
        gate, up = linear(x, p + "mlp.gate_proj"), linear(x, p + "mlp.up_proj")
        h = h + linear(gate / (1 + np.exp(-gate)) * up, p + "mlp.down_proj")
    h = rms_norm(h, w("model.norm.weight"), epsilon)
    return h @ w("lm_head.weight").T


def checkpoint_with_biases(tmp_path, projections, attention_bias, mlp_bias):
    """The Llama fixture with random biases on `projections` and the flags."""
    shapes = {
        name: value.shape[0]
        for name, value in load_file(
            str(checks.FIXTURES / "tiny_llama_gqa_hf" / "model.safetensors")
        ).items()
        if name.endswith("_proj.weight")
    }
    rng = np.random.default_rng(0)
    biases = {
        f"model.layers.{i}.{part}.{name}.bias": rng.normal(
            0, 0.5, shapes[f"model.layers.{i}.{part}.{name}.weight"]
        ).astype("float32")
        for i in range(2)
        for part, names in (("self_attn", ATTENTION), ("mlp", MLP))
        for name in names
        if name in projections
    }
    folder = checks.copy_fixture("llama_gqa", tmp_path, add=biases)
    checks.edit_json(
        folder, "config.json", attention_bias=attention_bias, mlp_bias=mlp_bias
    )
    return folder


def expected_logits(folder):
    config = json.loads((folder / "config.json").read_text())
    tensors = load_file(str(folder / "model.safetensors"))
    return hf_llama_logits(tensors, TOKEN_IDS[0], config)


CASES = {
    "attention_bias only": (ATTENTION, True, False),
    "mlp_bias only": (MLP, False, True),
}


@pytest.mark.parametrize("case", CASES)
def test_separate_bias_flags_load_to_the_reference_logits(case, tmp_path):
    folder = checkpoint_with_biases(tmp_path, *CASES[case])
    model = load_hf_llama(folder)
    want = expected_logits(folder)
    got = np.asarray(model(TOKEN_IDS))[0]
    np.testing.assert_allclose(got, want, atol=1e-4, rtol=0)
    # The biases matter: without them the logits differ by far more.
    tensors = {k: v for k, v in load_file(str(folder / "model.safetensors")).items()
               if not k.endswith(".bias")}  # fmt: skip
    config = json.loads((folder / "config.json").read_text())
    unbiased = hf_llama_logits(tensors, TOKEN_IDS[0], config)
    assert np.abs(unbiased - want).max() > 1e-2


@pytest.mark.parametrize("case", CASES)
def test_the_missing_biases_are_zeros_and_save_then_load_is_exact(case, tmp_path):
    projections, attention_bias, mlp_bias = CASES[case]
    model = load_hf_llama(checkpoint_with_biases(tmp_path, *CASES[case]))
    absent = MLP if attention_bias else ATTENTION
    biases = {  # HuggingFace projection: ours (gate and up are one kernel)
        "q_proj": "self_attention/query/bias",
        "k_proj": "self_attention/key_value/bias",
        "o_proj": "self_attention/attention_output/bias",
        "up_proj": "feed_forward/intermediate/bias",
        "down_proj": "feed_forward/output/bias",
    }
    for name, path in biases.items():
        [weight] = [w for w in model.weights
                    if w.path.endswith(f"transformer_layer_1/{path}")]  # fmt: skip
        assert (not np.asarray(weight).any()) == (name in absent), name
    again = load_hf_llama(save_hf_llama(model, tmp_path / "saved"))
    np.testing.assert_array_equal(np.asarray(again(TOKEN_IDS)), model(TOKEN_IDS))


def test_a_bias_the_flags_deny_is_refused(tmp_path):
    folder = checkpoint_with_biases(tmp_path, (*ATTENTION, "up_proj"), True, False)
    with pytest.raises(
        ValueError,
        match=r"With mlp_bias=false a checkpoint has no model\.layers\.0\.mlp\.up",
    ):
        load_hf_llama(folder)


def test_the_reference_matches_the_committed_transformers_logits():
    """The NumPy reference itself, on the fixture without biases, against the
    logits transformers computed for it (tools/make_hf_decoder_fixtures.py)."""
    folder = checks.FIXTURES / "tiny_llama_gqa_hf"
    config = json.loads((folder / "config.json").read_text())
    tensors = load_file(str(folder / "model.safetensors"))
    reference = checks.reference("llama_gqa")
    ids = reference["token_ids"][0]
    np.testing.assert_allclose(
        hf_llama_logits(tensors, ids, config), reference["logits"][0], atol=1e-4
    )

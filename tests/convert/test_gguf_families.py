"""Qwen2, Qwen3 and Phi-3 GGUF files written by llama.cpp's own converter.

The files (tests/fixtures/gguf/, made by tools/make_gguf_fixtures.py from
the tiny HuggingFace checkpoints) are checked against three references:
a float64 NumPy forward pass over their tensors as stored
(tests/convert/llama_reference.py, with ggml's NEOX RoPE; Phi-3's fused
`attn_qkv` and gate-up `ffn_up` split there as llama.cpp splits them),
llama.cpp's own logits of the same tokens, and transformers' logits of the
checkpoint they came from.
"""

import json
import unicodedata
from pathlib import Path

import gguf
import numpy as np
import pytest

from keras_tfm.convert import gguf_reader, load_gguf_llama, load_hf_llama
from keras_tfm.models.legacy_configs import flat_arguments
from tests.convert import decoder_checks as checks
from tests.convert.llama_reference import llama_logits, tensors_of

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
NAMES = ("qwen2", "qwen3", "phi3")
TYPES = ("f32", "f16", "q8_0")
# The real checkpoints' templates the files carry (chat_templates.json).
TEMPLATES = {"qwen2": "qwen2.5", "qwen3": "qwen3", "phi3": "phi3.5"}
# llama.cpp's CPU matmuls round the activations to F16 and Q8_0 for weights
# of those types (ours do not): its logits differ by up to 0.2% and 6% of
# their range on these files (measured, tools/make_gguf_fixtures.py; Phi-3:
# 0.23% and 3.5%); on F32 weights, by 2e-6 (Phi-3: 1e-6).
LLAMA_CPP_GAP = {"f32": 1e-5, "f16": 5e-3, "q8_0": 0.1}


def path_of(name, kind):
    return FIXTURES / "gguf" / f"tiny_{name}_{kind}.gguf"


@pytest.fixture(scope="module", params=[(n, t) for n in NAMES for t in TYPES])
def case(request):
    name, kind = request.param
    return name, kind, load_gguf_llama(path_of(name, kind))


def relative_gap(ours, theirs):
    theirs = np.asarray(theirs, "float64")
    span = theirs.max() - theirs.min()
    return float(np.max(np.abs(np.asarray(ours, "float64") - theirs)) / span)


def test_config_is_the_checkpoints(case):
    name, kind, model = case
    hf = load_hf_llama(FIXTURES / f"tiny_{name}_hf")
    ours, want = flat_arguments(model), flat_arguments(hf)
    for config in (ours, want):
        config.pop("tokenizer", None)
    assert ours == want
    assert model.query_key_norm is (name == "qwen3")
    assert model.use_bias is (name == "qwen2")
    reader = gguf_reader.open_gguf(path_of(name, kind))
    fused = {"blk.0.attn_qkv.weight", "blk.0.ffn_up.weight"}
    if name == "phi3":  # llama.cpp kept Phi-3's fused tensors fused
        assert fused <= set(gguf_reader.tensor_table(reader))
        assert "blk.0.ffn_gate.weight" not in gguf_reader.tensor_table(reader)


def test_logits_equal_the_numpy_reference_of_the_stored_tensors(case):
    name, kind, model = case
    reader = gguf_reader.open_gguf(path_of(name, kind))
    tensors = tensors_of(reader)
    ids = checks.reference(name)["token_ids"][:2]
    ours = np.asarray(model(ids))
    for row in range(len(ids)):
        want = llama_logits(
            tensors, ids[row], model.num_heads, model.num_key_value_heads,
            model.layer_norm_epsilon, model.rotary_max_wavelength,
            rope="half_split",
        )  # fmt: skip
        assert relative_gap(ours[row], want) < 1e-5


def test_logits_match_llama_cpp(case):
    name, kind, model = case
    llama_cpp = np.load(FIXTURES / "gguf" / f"tiny_{name}_llama_cpp.npz")
    theirs = llama_cpp[f"logits_{kind}"]
    ours = np.asarray(model(checks.reference(name)["token_ids"][: len(theirs)]))
    assert relative_gap(ours, theirs) < LLAMA_CPP_GAP[kind]
    agreement = np.mean(ours.argmax(-1) == theirs.argmax(-1))
    assert agreement >= (1.0 if kind != "q8_0" else 0.85)


@pytest.mark.parametrize("name", NAMES)
def test_the_float32_file_is_the_transformers_model(name):
    model = load_gguf_llama(path_of(name, "f32"))
    reference = checks.reference(name)
    assert relative_gap(model(reference["token_ids"]), reference["logits"]) < 1e-5
    checks.check_greedy(model, reference)


@pytest.mark.parametrize("name", NAMES)
def test_the_files_tokenizer_is_llama_cpps(name):
    # llama.cpp's "qwen2" pre-tokenizer is Qwen2's split without the NFC
    # normalizer of transformers' tokenizer.json: the ids are llama.cpp's,
    # and differ from transformers' only where NFC changes the text.
    tokenizer = load_gguf_llama(path_of(name, "f16")).tokenizer
    llama_cpp = np.load(FIXTURES / "gguf" / f"tiny_{name}_llama_cpp.npz")
    reference = checks.reference(name)
    for i, text in enumerate(str(t) for t in reference["texts"]):
        ours = np.asarray(tokenizer(text)).tolist()
        assert ours == llama_cpp[f"ids_{i}"].tolist(), text
        if unicodedata.normalize("NFC", text) == text:
            assert ours == reference[f"ids_{i}"].tolist(), text


@pytest.mark.parametrize("name", NAMES)
def test_the_files_chat_template_renders_as_transformers(name):
    tokenizer = load_gguf_llama(path_of(name, "q8_0")).tokenizer
    fixture = json.loads((FIXTURES / "chat_templates.json").read_text())
    template = fixture[TEMPLATES[name]]
    assert tokenizer.chat_template == template["template"]
    hf = load_hf_llama(FIXTURES / f"tiny_{name}_hf").tokenizer
    assert (tokenizer.bos_token, tokenizer.eos_token) == (hf.bos_token, hf.eos_token)
    case = template["cases"][0]
    prompt = tokenizer.apply_chat_template(case["messages"])
    assert prompt == case["text"]


@pytest.mark.parametrize("name", ["qwen3", "phi3"])
def test_as_int8_blocks_equals_the_float32_load(name):
    # Phi-3's fused Q8_0 rows are split as blocks, as stored.
    path = path_of(name, "q8_0")
    ids = checks.reference(name)["token_ids"][:2]
    blocks = load_gguf_llama(path, weights="int8_blocks")
    floats = load_gguf_llama(path)
    assert relative_gap(blocks(ids), floats(ids)) < 1e-5


def test_qwen2_as_int8_blocks_is_refused_by_its_biases():
    with pytest.raises(ValueError, match="without biases"):
        load_gguf_llama(path_of("qwen2", "q8_0"), weights="int8_blocks")


def test_keras_tfm_chat_answers_from_the_file_with_its_template(capsys):
    from keras_tfm import cli

    # Qwen3's template (Qwen2.5's default system prompt is longer than the
    # tiny model's 64 positions with its 320-token vocabulary).
    path = path_of("qwen3", "q8_0")
    case = json.loads((FIXTURES / "chat_templates.json").read_text())["qwen3"]
    case = case["cases"][0]  # "Hi!", rendered by transformers
    model = load_gguf_llama(path)
    # The answer: a greedy argmax loop over full forward passes of the
    # prompt transformers' rendering gives, up to the end-of-turn token.
    ids, answer = np.asarray(model.tokenizer(case["text"])).tolist(), []
    for _ in range(4):
        next_id = int(np.argmax(np.asarray(model(np.array([ids])))[0, -1]))
        if next_id == model.tokenizer.end_token_id:
            break
        ids.append(next_id)
        answer.append(next_id)
    assert answer  # the answer is not the end of the turn at once
    cli.main(["chat", case["messages"], "--model", str(path), "--max-new-tokens", "4"])
    assert capsys.readouterr().out == model.tokenizer.detokenize(answer) + "\n"


def rewritten_phi3(target, metadata=None, tensors=None):
    """The F32 Phi-3 file rewritten with `metadata` (key -> value of the
    type the file has) changed and `tensors` (name -> float32) added."""
    reader = gguf.GGUFReader(path_of("phi3", "f32"))
    writer = gguf.GGUFWriter(str(target), "phi3")
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        array = field.types[0] == gguf.GGUFValueType.ARRAY
        value = (metadata or {}).get(key, field.contents())
        writer.add_key_value(
            key, value, field.types[0], field.types[-1] if array else None
        )
    for tensor in reader.tensors:
        writer.add_tensor(tensor.name, np.asarray(tensor.data))
    for name, value in (tensors or {}).items():
        writer.add_tensor(name, value)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return target


def test_a_rewritten_phi3_file_loads_as_the_original(tmp_path):
    # The rewriting below changes only what it is asked to.
    ids = checks.reference("phi3")["token_ids"][:1]
    copy = load_gguf_llama(rewritten_phi3(tmp_path / "copy.gguf"))
    want = load_gguf_llama(path_of("phi3", "f32"))
    np.testing.assert_array_equal(np.asarray(copy(ids)), np.asarray(want(ids)))


@pytest.mark.parametrize(
    "metadata, tensors, message",
    [
        # Phi-4-mini's RoPE over 3/4 of each head (llama.cpp writes 6 of 8).
        ({"phi3.rope.dimension_count": 6}, None, "rope.dimension_count=6"),
        # Phi-3-128k's and Phi-3.5's LongRoPE: factor tensors, no type key.
        (None, {"rope_factors_long.weight": np.ones(4, "float32")},
         "'rope_factors_long.weight'"),
    ],
)  # fmt: skip
def test_unsupported_phi3_files_are_refused_by_name(
    tmp_path, metadata, tensors, message
):
    path = rewritten_phi3(tmp_path / "bad.gguf", metadata, tensors)
    with pytest.raises(ValueError, match=message):
        load_gguf_llama(path)


def test_a_phi3_files_sliding_window_caps_the_length_as_the_hf_load(tmp_path):
    path = rewritten_phi3(
        tmp_path / "window.gguf", {"phi3.attention.sliding_window": 16}
    )
    folder = checks.copy_fixture("phi3", tmp_path)
    checks.edit_json(folder, "config.json", sliding_window=16)
    assert load_gguf_llama(path).max_sequence_length == 16
    assert load_hf_llama(folder).max_sequence_length == 16
    with pytest.raises(ValueError, match="sliding_window=16"):
        load_gguf_llama(path, max_sequence_length=17)


def test_an_unsupported_architecture_is_refused_by_name(tmp_path):
    from keras_tfm import cli
    from tests.convert.tiny_gguf import write_tiny_llama

    path = tmp_path / "tiny_falcon.gguf"
    write_tiny_llama(path, architecture="falcon")
    with pytest.raises(SystemExit, match="general.architecture='falcon'"):
        cli.main(["chat", "Hi!", "--model", str(path)])


def test_load_checkpoint_takes_either_kind_by_what_it_is(tmp_path):
    from keras_tfm.convert import checkpoint, load_checkpoint

    assert checks.run_docstring_examples(
        [load_checkpoint], {"FIXTURES": FIXTURES}
    ).failed == 0  # fmt: skip
    folder = checks.copy_fixture("qwen3", tmp_path / "hf")
    assert load_checkpoint(folder).query_key_norm
    checks.edit_json(folder, "config.json", model_type="gemma3_text")
    with pytest.raises(ValueError, match="model_type 'gemma3_text' are not supported"):
        load_checkpoint(folder)
    # A keras-tfm preset folder (a config.json naming a class) is no checkpoint.
    preset = tmp_path / "preset"
    preset.mkdir()
    (preset / "config.json").write_text('{"class_name": "CausalLM", "config": {}}')
    assert not checkpoint.is_checkpoint(preset)
    with pytest.raises(ValueError, match="neither a GGUF file nor a HuggingFace"):
        load_checkpoint(preset)


def test_a_k_quant_file_from_llama_cpps_quantizer():
    # Q4_K_M, as llama.cpp's quantizer writes it (Q4_K and Q6_K blocks), of
    # a Qwen3 256 wide: the NumPy reference over gguf's dequantization, and
    # llama.cpp within what its Q8_K activations cost (1.6% of the range,
    # 29 of 32 top-1 ids, measured).
    path = FIXTURES / "gguf" / "tiny_qwen3_wide_q4_k_m.gguf"
    reader = gguf_reader.open_gguf(path)
    assert {t.tensor_type.name for t in reader.tensors} == {"F32", "Q4_K", "Q6_K"}
    model = load_gguf_llama(path)
    ids = checks.reference("qwen3")["token_ids"][:2]
    ours = np.asarray(model(ids))
    tensors = tensors_of(reader)
    for row in range(len(ids)):
        want = llama_logits(
            tensors, ids[row], 4, 2, 1e-6, 1e6, rope="half_split"
        )  # fmt: skip
        assert relative_gap(ours[row], want) < 1e-5
    theirs = np.load(FIXTURES / "gguf" / "tiny_qwen3_wide_llama_cpp.npz")
    theirs = theirs["logits_q4_k_m"]
    assert relative_gap(ours, theirs) < 0.05
    assert np.mean(ours.argmax(-1) == theirs.argmax(-1)) >= 0.85

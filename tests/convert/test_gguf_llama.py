"""GGUF Llama loading: a tiny written file, and SmolLM2-135M-Instruct against
transformers' outputs (tests/fixtures/smollm2_reference.*, made by
tools/make_smollm2_fixture.py) and a float64 NumPy forward pass."""

import json
from pathlib import Path

import numpy as np
import pytest

import keras_tfm
from keras_tfm.convert import gguf_llama, gguf_names, gguf_reader, load_gguf_llama
from keras_tfm.models import CausalLM
from keras_tfm.models.legacy_configs import flat_arguments
from keras_tfm.zoo.smollm2 import smollm2_gguf_path
from tests.convert.decoder_checks import run_docstring_examples
from tests.convert.llama_reference import llama_logits, tensors_of
from tests.convert.tiny_gguf import CONFIG, Q, write_tiny_llama

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def smollm2_or_skip():
    try:
        return smollm2_gguf_path()
    except ValueError as error:
        pytest.skip(str(error))


@pytest.fixture(scope="module")
def reference():
    arrays = dict(np.load(FIXTURES / "smollm2_reference.npz"))  # file closed
    text = json.loads((FIXTURES / "smollm2_reference.json").read_text("utf-8"))
    return text, arrays


@pytest.fixture(scope="module")
def smollm2_reader():
    return gguf_reader.open_gguf(smollm2_or_skip())


@pytest.fixture(scope="module")
def smollm2_tensors(smollm2_reader):
    return tensors_of(smollm2_reader)


def relative_gap(ours, theirs, span):
    return float(np.max(np.abs(np.asarray(ours, "float64") - theirs)) / span)


def test_unpermute_rows_inverts_llama_cpp_permute():
    # llama.cpp's convert_hf_to_gguf.py: w.reshape(heads, 2, d // 2, in)
    # .swapaxes(1, 2), i.e. row i + j * d/2 of a head goes to row 2i + j.
    heads, head_dim = 3, 8
    hf = np.arange(heads * head_dim * 2, dtype="float32").reshape(-1, 2)
    stored = np.empty_like(hf)
    for h in range(heads):
        for i in range(head_dim // 2):
            for j in range(2):
                stored[h * head_dim + 2 * i + j] = hf[
                    h * head_dim + i + j * head_dim // 2
                ]
    assert np.array_equal(gguf_names.unpermute_rows(stored, heads), hf)
    with pytest.raises(ValueError, match="multiple of 2 \\* num_heads=6"):
        gguf_names.unpermute_rows(np.zeros((20, 4)), 3)


def test_smollm2_unpermuted_rows_are_transformers_q_and_k(smollm2_reader, reference):
    _, arrays = reference
    table = gguf_reader.tensor_table(smollm2_reader)
    query = gguf_reader.dequantize(table["blk.0.attn_q.weight"], (576, 576))
    key = gguf_reader.dequantize(table["blk.0.attn_k.weight"], (192, 576))
    want_q, want_k = arrays["layer_0_q_proj_slice"], arrays["layer_0_k_proj_slice"]
    # As stored, the rows are in ggml's order, not transformers'.
    assert not np.array_equal(query[:192, :4], want_q)
    assert np.array_equal(gguf_names.unpermute_rows(query, 9)[:192, :4], want_q)
    assert np.array_equal(gguf_names.unpermute_rows(key, 3)[:, :4], want_k)


def test_numpy_reference_reproduces_transformers_logits(smollm2_tensors, reference):
    # Two independent implementations agree: this checks the fixture too
    # (on one prompt: the float64 pass takes seconds per prompt).
    text, arrays = reference
    for i, entry in list(enumerate(text["continuations"]))[:1]:
        logits = llama_logits(smollm2_tensors, entry["prompt_ids"], 9, 3, 1e-5, 1e5)
        last = arrays[f"prompt_{i}_last_logits"]
        span = float(last.max() - last.min())
        assert relative_gap(logits[-1], last, span) < 1e-5
        at_ids = logits[:, arrays["logit_ids"]]
        assert relative_gap(at_ids, arrays[f"prompt_{i}_logits_at_ids"], span) < 1e-5


@pytest.mark.parametrize("untied", [False, True])
def test_tiny_gguf_loads_to_the_numpy_reference(tmp_path, untied):
    path = tmp_path / "tiny.gguf"
    stored = write_tiny_llama(path, seed=3, untied=untied)
    model = load_gguf_llama(path)
    assert isinstance(model, CausalLM)
    assert model.tie_word_embeddings is not untied
    assert (model.num_layers, model.num_key_value_heads, model.use_bias) == (
        2,
        2,
        False,
    )
    assert model.rotary_max_wavelength == CONFIG["base"]
    ids = np.array([[5, 200, 17, 90, 261, 3, 44, 120]])
    want = llama_logits(stored, ids[0], 4, 2, 1e-5, CONFIG["base"])
    ours = np.asarray(model(ids))[0]
    assert relative_gap(ours, want, want.max() - want.min()) < 1e-5


def test_tiny_gguf_with_float32_weights_and_no_tokenizer_template(tmp_path):
    path = tmp_path / "f32.gguf"
    stored = write_tiny_llama(path, linear_type=Q.F32, embedding_type=Q.F32)
    model = load_gguf_llama(path, max_sequence_length=16)
    assert model.max_sequence_length == 16
    kernel = model.backbone.get_layer("token_embedding").embeddings.numpy()
    assert np.array_equal(kernel, stored["token_embd.weight"])


def test_smollm2_config(smollm2):
    config = flat_arguments(smollm2)
    want = dict(
        vocabulary_size=49152, num_layers=30, num_heads=9, hidden_dim=576,
        intermediate_dim=1536, num_key_value_heads=3, activation="swiglu",
        normalization="rms_norm", position_encoding="rotary",
        rotary_max_wavelength=100000.0, use_bias=False, tie_word_embeddings=True,
        padding_id=None, max_sequence_length=8192,
    )  # fmt: skip
    assert {k: config[k] for k in want} == want
    assert abs(config["layer_norm_epsilon"] - 1e-5) < 1e-10
    assert smollm2.count_params() == 134_515_008


def test_smollm2_logits_match_transformers(smollm2, reference):
    text, arrays = reference
    for i, entry in enumerate(text["continuations"]):
        logits = np.asarray(smollm2(np.array([entry["prompt_ids"]])))[0]
        last = arrays[f"prompt_{i}_last_logits"]
        span = float(last.max() - last.min())
        assert relative_gap(logits[-1], last, span) < 1e-3
        at_ids = logits[:, arrays["logit_ids"]]
        assert relative_gap(at_ids, arrays[f"prompt_{i}_logits_at_ids"], span) < 1e-3


@pytest.fixture(scope="module")
def generated(smollm2, reference):
    """One greedy `generate` call (one XLA compilation) for every prompt."""
    text, _ = reference
    prompts = [entry["prompt_ids"] for entry in text["continuations"]]
    prompts.append(text["chat_answer"]["prompt_ids"])
    # stop_token_ids=[]: 32 tokens as transformers made them, past <|im_end|>.
    return smollm2.generate(prompts, max_new_tokens=32, stop_token_ids=[])


@pytest.mark.slow  # the real SmolLM2 decoding (its logits: the test above)
def test_smollm2_greedy_continuations_match_transformers(generated, reference):
    text, _ = reference
    for entry, output in zip(text["continuations"], generated, strict=False):
        assert list(output) == entry["ids"], entry["prompt"]


def test_smollm2_cache_equals_full_pass(smollm2, reference):
    text, _ = reference
    ids = np.array([text["continuations"][2]["ids"][:12]])
    full = np.asarray(smollm2(ids))
    cache = smollm2.empty_cache(1, 12)
    prefill, cache = smollm2.call_with_cache(ids[:, :9], cache, 0)
    steps = [np.asarray(prefill)]
    for index in range(9, 12):
        logits, cache = smollm2.call_with_cache(ids[:, index : index + 1], cache, index)
        steps.append(np.asarray(logits))
    stepped = np.concatenate(steps, axis=1)
    span = float(full.max() - full.min())
    assert relative_gap(stepped, full, span) < 1e-4


@pytest.mark.slow  # SmolLM2 decoding (its answer: zoo/test_installed_checkpoints.py)
def test_smollm2_answers_the_chat_question(smollm2, generated, reference):
    text, _ = reference
    answer = text["chat_answer"]
    assert answer["text"] == "The capital of France is Paris."
    tokenizer = smollm2.tokenizer
    prompt = tokenizer.apply_chat_template(answer["question"])
    assert [int(i) for i in tokenizer(prompt)] == answer["prompt_ids"]
    new = list(generated[-1][len(answer["prompt_ids"]) :])
    end = new.index(tokenizer.end_token_id) + 1
    assert answer["prompt_ids"] + new[:end] == answer["ids"]
    assert tokenizer.detokenize(new[: end - 1]) == answer["text"]


def test_docstring_examples(smollm2):
    # The example runs on the model loaded above (loading it again would add
    # 20 s to the suite; the loading itself is what the other tests check).
    result = run_docstring_examples(
        [gguf_llama.load_gguf_llama],
        {
            "keras_tfm": keras_tfm,
            "np": np,
            "load_gguf_llama": lambda path: smollm2,
        },
    )
    assert result.attempted > 0 and result.failed == 0

"""Decoding-step templates: the converter's LiteRT file, filled without it.

On a one-layer Llama (RMSNorm, whose scales the converter folds into the
next projections, SwiGLU, rotary positions, grouped queries, tied
embeddings): a template filled with weights it was not made from is the
converter's file for those weights, buffer for buffer; a template missing a
placement is refused. SmolLM2's kept template, filled with its weights,
answers transformers' greedy answer; the slow test checks it against the
converter as it is today (`tools/make_litert_templates.py` remakes it).
"""

import doctest
import gzip
import json
import re
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest

from keras_tfm.export import litert_template
from keras_tfm.export.litert_decoder import export_litert_decoder
from keras_tfm.kernels import rotated_inputs
from keras_tfm.lite import decoder_template, quantized_step, rotation
from tests.builders import causal_lm

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def _llama():
    return causal_lm(
        vocabulary_size=40, num_layers=1, num_heads=2, num_key_value_heads=1,
        head_dim=8, hidden_dim=16, intermediate_dim=24, max_sequence_length=8,
        activation="swiglu", normalization="rms_norm", position_encoding="rotary",
        use_bias=False,
    )  # fmt: skip


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """The model (random weights of its own), its template, its converted file."""
    model = _llama()
    generator = np.random.default_rng(7)
    for variable in model.weights:
        variable.assign(generator.uniform(0.5, 1.5, variable.shape))
    folder = tmp_path_factory.mktemp("template") / "litert_decoder"
    own = {v.path: v.numpy() for v in model.weights}
    description = litert_template.make_decoder_template(model, folder)
    assert all(np.array_equal(v.numpy(), own[v.path]) for v in model.weights)
    converted = tmp_path_factory.mktemp("converted") / "step.tflite"
    export_litert_decoder(model, converted)
    return model, folder, description, converted.read_bytes()


def _filled(folder, weights):
    with tempfile.TemporaryDirectory() as work:
        path = Path(work) / "step.tflite"
        decoder_template.fill_template(folder, weights, path)
        return path.read_bytes()


def _logits(model, path):
    return litert_template._logits(path, 8, 8, model.backbone.vocabulary_size)


def test_a_filled_template_is_the_converters_file(made, tmp_path):
    model, folder, description, converted = made
    weights = {v.path: v for v in model.weights}
    decoder_template.fill_template(folder, weights, tmp_path / "filled.tflite")
    assert (tmp_path / "filled.tflite").stat().st_size == description["size"]
    (tmp_path / "converted.tflite").write_bytes(converted)
    np.testing.assert_array_equal(
        _logits(model, tmp_path / "filled.tflite"),
        _logits(model, tmp_path / "converted.tflite"),
    )
    # Every weight is placed, the norms' scales folded into the projections.
    placed = {p[1] for p in description["placements"]}
    scales = {p[3] for p in description["placements"]} - {None}
    assert placed | scales == set(weights)
    assert "transformer_layer_0/self_attention_norm/scale" in scales
    # The template keeps none of the random weights it was made from.
    kept = gzip.decompress(Path(folder, decoder_template.BYTES).read_bytes())
    for path, value in litert_template._random_weights(model, 0).items():
        assert value.tobytes()[:32] not in kept, path


def test_a_template_missing_a_scale_is_refused(made, tmp_path, monkeypatch):
    model, folder, _, converted = made
    # A folded scale left out of its placement: other logits.
    broken = tmp_path / "broken"
    shutil.copytree(folder, broken)
    description = json.loads((broken / decoder_template.DESCRIPTION).read_text())
    scaled = next(p for p in description["placements"] if p[3] is not None)
    scaled[3] = None
    (broken / decoder_template.DESCRIPTION).write_text(json.dumps(description))
    weights = {v.path: v for v in model.weights}
    decoder_template.fill_template(broken, weights, tmp_path / "broken.tflite")
    (tmp_path / "converted.tflite").write_bytes(converted)
    assert not np.array_equal(
        _logits(model, tmp_path / "broken.tflite"),
        _logits(model, tmp_path / "converted.tflite"),
    )
    # make_decoder_template checks its template so and keeps no folder.
    real, calls = litert_template._scaled_match, []

    def first_one_missed(*args):
        calls.append(args)
        return None if len(calls) == 1 else real(*args)

    monkeypatch.setattr(litert_template, "_scaled_match", first_one_missed)
    target = tmp_path / "refused"
    with pytest.raises(ValueError, match="does not hold"):
        litert_template.make_decoder_template(model, target)
    assert not target.exists()


def test_a_template_filled_with_unit_scales_gives_the_models_logits(made, tmp_path):
    # Keras' initial weights (RMSNorm scales of ones, which the converter
    # would fold away) in the template made on random ones: still the model.
    from keras_tfm.lite.litert_decoder import LiteRTDecoder

    model, folder = _llama(), made[1]
    weights = {v.path: v for v in model.weights}
    decoder_template.fill_template(folder, weights, tmp_path / "s.tflite")
    decoder = LiteRTDecoder(tmp_path / "s.tflite", kernels="builtin")
    ids = [3, 17, 5, 29, 11, 2, 8, 30]
    full = np.asarray(model(np.array([ids])), "float64")[0]
    np.testing.assert_allclose(decoder.prefill(ids[:5], 0), full[4], atol=1e-5)
    for index in range(5, 8):
        logits = decoder.decode(ids[index], index)
        np.testing.assert_allclose(logits, full[index], atol=1e-5)


def test_a_rewritten_file_is_not_run_with_its_old_packed_weights(made, tmp_path):
    # XNNPACK's weight cache beside the file does not know the file it came
    # from: a file rewritten in place must be packed again.
    from keras_tfm.lite.litert_decoder import LiteRTDecoder

    model, folder = made[0], made[1]
    path = tmp_path / "s.tflite"
    decoder_template.fill_template(folder, {v.path: v for v in model.weights}, path)
    first = LiteRTDecoder(path).decode(3, 0)
    assert path.with_name("s.tflite.xnnpack").exists()
    other = _llama()  # its own initial weights
    decoder_template.fill_template(folder, {v.path: v for v in other.weights}, path)
    expected = LiteRTDecoder(path, kernels="builtin").decode(3, 0)
    assert not np.allclose(first, expected, atol=1e-3)
    np.testing.assert_allclose(LiteRTDecoder(path).decode(3, 0), expected, atol=1e-4)


def test_weights_of_other_shapes_are_refused(made, tmp_path):
    model, folder, _, _ = made
    weights = {v.path: v.numpy() for v in model.weights}
    weights["final_norm/scale"] = np.ones(17, "float32")
    with pytest.raises(ValueError, match="names and shapes differ"):
        decoder_template.fill_template(folder, weights, tmp_path / "x.tflite")
    assert not (tmp_path / "x.tflite").exists()
    assert decoder_template.read_description(tmp_path) is None  # no template


def test_smollm2_template_answers_as_transformers(smollm2, tmp_path):
    from keras_tfm.chat import entry_writer
    from keras_tfm.lite import chat_entries
    from keras_tfm.lite.litert_chat import LiteRTChat

    name = "smollm2_135m_instruct"
    folder = entry_writer.write_chat_entry(smollm2, name, "float32", {}, tmp_path)
    found = chat_entries.find_entry(name, "float32", tmp_path)
    assert folder is not None and found[0] == folder
    chat = LiteRTChat(*found)
    reference = json.loads((FIXTURES / "smollm2_reference.json").read_text("utf-8"))
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    assert chat.chat(messages, 16) == reference["chat_answer"]["text"]


@pytest.mark.slow  # a conversion of SmolLM2's step: ~1 minute, 5 GB
def test_smollm2_template_holds_for_the_converter_as_it_is(smollm2):
    from keras_tfm.chat import entry_writer

    kept = entry_writer.template_folder("smollm2_135m_instruct")
    litert_template.check_decoder_template(smollm2, kept)


@pytest.mark.parametrize(
    "module", [litert_template, decoder_template, rotation, rotated_inputs]
)
def test_docstring_examples(module):
    assert doctest.testmod(module, optionflags=doctest.ELLIPSIS).failed == 0


def test_a_rotated_fill_is_exact_and_the_int8_step_stays_close(made, tmp_path):
    # The rotation changes the weights, not the function: the rotated float
    # step's logits are the plain one's (to float rounding). The int8 step
    # then holds int8 matrices only where INT8_MATRICES says, and its
    # next-token distribution stays near the float one's.
    from keras_tfm.lite import quantized_step

    model, folder, _, _ = made
    weights = {v.path: v for v in model.weights}
    decoder_template.fill_template(folder, weights, tmp_path / "plain.tflite")
    quantized_step.write_rotated_step(folder, weights, tmp_path / "rotated.tflite")
    plain = _logits(model, tmp_path / "plain.tflite")
    np.testing.assert_allclose(
        _logits(model, tmp_path / "rotated.tflite"), plain, rtol=1e-5, atol=1e-5
    )
    quantized_step.write_quantized_step(folder, weights, tmp_path / "int8.tflite")
    int8, kept = _int8_matrices(tmp_path / "int8.tflite")
    assert int8 and all(
        re.search(r"query|intermediate|attention_output|rotated_output|embedding", n)
        for n in int8
    ), int8
    assert any("key_value" in n for n in kept)
    assert any("rotated_output" in n for n in int8)  # down: its input rotated
    # A template's own choice keeps matrices float32 (quantization.json).
    chosen = tmp_path / "chosen"
    shutil.copytree(folder, chosen)
    (chosen / quantized_step.QUANTIZATION).write_text(
        json.dumps({"float32_matrices": "feed_forward_1/rotated_output/"})
    )
    quantized_step.write_quantized_step(chosen, weights, tmp_path / "some.tflite")
    some, _ = _int8_matrices(tmp_path / "some.tflite")
    assert some == {n for n in int8 if "rotated_output" not in n} != int8
    quantized = _logits(model, tmp_path / "int8.tflite")
    # The float32 reference's distribution against the int8 step's.
    p = np.exp(plain - plain.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    q = np.exp(quantized - quantized.max(1, keepdims=True))
    q /= q.sum(1, keepdims=True)
    assert (p * np.log(p / q)).sum(1).mean() < 0.01


def _int8_matrices(path):
    """The names of a step file's constant matrices: (int8, float32)."""
    from ai_edge_litert import schema_py_generated as schema

    graph = schema.Model.GetRootAsModel(Path(path).read_bytes(), 0).Subgraphs(0)
    found = ({}, {})
    for t in range(graph.TensorsLength()):
        tensor = graph.Tensors(t)
        if tensor.ShapeLength() == 2 and tensor.Buffer() > 0:  # a constant matrix
            is_int8 = tensor.Type() == schema.TensorType.INT8
            found[0 if is_int8 else 1][tensor.Name().decode()] = True
    return set(found[0]), set(found[1])


def test_a_rotation_refuses_what_it_cannot_rotate_exactly():
    from keras_tfm.lite import rotation

    q = rotation.residual_rotation(24, seed=3)  # 3 x 8: the Kronecker form
    np.testing.assert_allclose(q @ q.T, np.eye(24), atol=1e-12)
    values = rotation.rotated_values({"x/bias": np.ones(24)}, q)
    with pytest.raises(ValueError, match="'x/bias'"):
        values("x/bias", [0], None)


def test_smollm2_int8_entry_stays_within_the_quality_gate(smollm2, tmp_path):
    # The chat's default: SmolLM2's int8 entry, teacher-forced over a text
    # against the float32 step filled from the same template. A guard, not
    # the gate (benchmarks/quantized_quality.py's, over 1,024 tokens: KL
    # 0.0041-0.0091, top-1 0.954-0.957): on these 128 positions the mode
    # gave KL 0.012 and top-1 0.95; without the rotations the benchmark
    # measures KL 0.07 over its 1,024.
    from tokenizers import Tokenizer

    from keras_tfm.chat import entry_writer
    from keras_tfm.datasets.default_corpus import load_default_corpus
    from keras_tfm.lite import chat_entries
    from keras_tfm.lite.litert_decoder import LiteRTDecoder

    name = "smollm2_135m_instruct"
    assert chat_entries.default_weights(name) == "int8"
    said = []
    folder = entry_writer.write_chat_entry(
        smollm2, name, "int8", {}, tmp_path, announce=said.append
    )
    assert chat_entries.find_entry(name, "int8", tmp_path)[0] == folder
    assert len(said) == 1 and "int8 LiteRT step" in said[0]  # seconds: said first
    weights = {v.path: v for v in smollm2.weights}
    template = entry_writer.template_folder(name)
    decoder_template.fill_template(template, weights, tmp_path / "f32.tflite")
    tokenizer = Tokenizer.from_file(str(folder / chat_entries.TOKENIZER))
    ids = tokenizer.encode(load_default_corpus()[:2000]).ids[:160]

    def log_probs(path):
        decoder = LiteRTDecoder(path)
        rows = [decoder.prefill(ids[:32], 0)]
        rows += [decoder.decode(ids[i], i) for i in range(32, len(ids) - 1)]
        rows = np.asarray(rows, "float64")
        rows -= rows.max(1, keepdims=True)
        return rows - np.log(np.exp(rows).sum(1, keepdims=True))

    reference = log_probs(tmp_path / "f32.tflite")
    quantized = log_probs(folder / chat_entries.DECODER)
    kl = (np.exp(reference) * (reference - quantized)).sum(1).mean()
    top1 = (reference.argmax(1) == quantized.argmax(1)).mean()
    assert kl <= 0.025 and top1 >= 0.9, (kl, top1)
    # The quantized matrices are most of what a token reads: the file is
    # about half the float step's.
    assert (folder / chat_entries.DECODER).stat().st_size < 0.6 * (
        tmp_path / "f32.tflite"
    ).stat().st_size


def test_a_remade_template_keeps_its_int8_choice(made, tmp_path):
    model, folder, _, _ = made
    remade = tmp_path / "litert_decoder"
    shutil.copytree(folder, remade)
    choice = remade / quantized_step.QUANTIZATION
    choice.write_text(json.dumps({"float32_matrices": "rotated_output/"}))
    litert_template.make_decoder_template(model, remade, overwrite=True)
    assert json.loads(choice.read_text()) == {"float32_matrices": "rotated_output/"}


def test_smollm2_template_keeps_four_down_projections_float32():
    # The measured choice (quantization.json's "why") names four layers; an
    # op name the converter changed would silently quantize them all.
    from ai_edge_litert import schema_py_generated as schema

    folder = FIXTURES.parents[1] / "zoo" / "smollm2_135m_instruct" / "litert_decoder"
    kept = json.loads((folder / quantized_step.QUANTIZATION).read_text())
    model = schema.Model.GetRootAsModel(
        gzip.decompress((folder / "template.bin.gz").read_bytes()), 0
    )
    for s in range(model.SubgraphsLength()):
        graph = model.Subgraphs(s)
        names = {graph.Tensors(t).Name().decode() for t in range(graph.TensorsLength())}
        layer = r"transformer_layer_(\d+)_1/feed_forward_1/rotated_output/"
        downs = {re.search(layer, n)[1] for n in names if re.search(layer, n)}
        chosen = {
            re.search(layer, n)[1]
            for n in names
            if re.search(layer, n) and re.search(kept["float32_matrices"], n)
        }
        assert len(downs) == 30 and len(chosen) == 4, (graph.Name(), chosen)

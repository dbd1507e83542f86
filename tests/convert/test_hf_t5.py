"""load_hf_t5 / save_hf_t5 against transformers' T5ForConditionalGeneration.

The references were made once by tools/make_hf_t5_fixtures.py (torch
2.14.1, transformers 5.24.0) from two committed tiny random checkpoints:
T5's shape (relu, tied head scaled by d_model ** -0.5, one file) and T5
v1.1 / FLAN-T5's (gated-gelu, separate head, shards).
"""

import doctest
import json
import shutil

import numpy as np
import pytest
import tensorflow as tf
from safetensors.numpy import load_file, save_file

import keras_tfm
from keras_tfm.convert import T5Tokenizer, load_hf_t5, save_hf_t5
from keras_tfm.convert import t5 as hf_t5
from keras_tfm.export import translate_signatures
from keras_tfm.models import Seq2SeqLM
from keras_tfm.tokenizers import t5_tokenizer
from tests.convert.decoder_checks import FIXTURES

SHAPES = {"t5_": "tiny_t5_hf", "v1_1_": "tiny_t5_v1_1_hf"}


@pytest.fixture(scope="module")
def reference():
    return dict(np.load(FIXTURES / "tiny_t5_reference.npz"))  # file closed


@pytest.fixture(scope="module", params=list(SHAPES), ids=["t5", "v1_1"])
def loaded(request):
    return request.param, load_hf_t5(FIXTURES / SHAPES[request.param])


def texts(reference):
    return [str(t) for t in reference["texts"]]


def logits_of(model, reference, prefix):
    return np.asarray(
        model(
            {
                "source_ids": reference[prefix + "source_ids"],
                "target_ids": reference[prefix + "decoder_input_ids"],
            }
        )
    )


def tensors_of(folder):
    tensors = {}
    for path in sorted(folder.glob("*.safetensors")):
        tensors.update(load_file(str(path)))
    return tensors


def test_config_is_the_checkpoints(loaded):
    prefix, model = loaded
    assert isinstance(model, Seq2SeqLM)
    backbone = model.backbone
    assert (backbone.num_encoder_layers, backbone.num_decoder_layers) == (2, 3)
    assert backbone.hidden_dim == 16 and backbone.intermediate_dim == 32
    attention = backbone.decoder_transformer_layers[0].self_attention
    assert attention.effective_head_dim == 6 and backbone.num_heads == 4
    assert backbone.position_encoding == "relative"
    assert backbone.relative_attention_num_buckets == 8
    assert backbone.relative_attention_max_distance == 12
    assert not backbone.scale_attention and not backbone.use_bias
    assert backbone.normalization == "rms_norm" and backbone.normalize_first
    t5 = prefix == "t5_"
    assert backbone.activation == ("relu" if t5 else "geglu_approximate")
    assert model.tie_word_embeddings is t5 and model.scale_decoder_outputs is t5
    assert model.decoder_start_id() == 0 == backbone.padding_id


def test_logits_equal_transformers(loaded, reference):
    prefix, model = loaded
    want = reference[prefix + "logits"]
    got = logits_of(model, reference, prefix)
    # Within 1e-4 of the logits' range; transformers' own float32 differs
    # from its float64 by float64_gap, the rounding floor.
    gap = np.abs(got - want).max() / np.ptp(want)
    assert gap < 1e-4, gap
    assert float(reference[prefix + "float64_gap"]) / np.ptp(want) < 1e-4


def test_greedy_ids_equal_transformers(loaded, reference):
    prefix, model = loaded
    sources = reference[prefix + "source_ids"]
    rows = [list(row[row != 0]) for row in sources]
    got = model.generate(rows, max_new_tokens=10, stop_token_ids=[])
    assert got == reference[prefix + "greedy"].tolist()


def test_the_padded_batch_gives_the_same_greedy_ids(loaded, reference):
    # Padding ("<pad>", the padding id) is masked: the dense padded batch
    # decodes as the rows alone.
    prefix, model = loaded
    got = model.generate(
        reference[prefix + "source_ids"], max_new_tokens=10, stop_token_ids=[]
    )
    assert got == reference[prefix + "greedy"].tolist()


@pytest.mark.parametrize("source", ["spiece.model", "tokenizer.json"])
def test_token_ids_equal_transformers(reference, source, tmp_path):
    folder = tmp_path / "t5"
    shutil.copytree(FIXTURES / "tiny_t5_hf", folder)
    other = {"spiece.model": "tokenizer.json", "tokenizer.json": "spiece.model"}
    (folder / other[source]).unlink()
    tokenizer = hf_t5.convert_tokenizer(
        folder, json.loads((folder / "config.json").read_text())
    )
    for i, text in enumerate(texts(reference)):
        assert np.asarray(tokenizer(text)).tolist() == reference[f"ids_{i}"].tolist()
    # Inside tf.data, as fit tokenizes.
    dataset = tf.data.Dataset.from_tensor_slices(texts(reference)).batch(8)
    rows = next(iter(dataset.map(tokenizer))).to_list()
    assert rows == [reference[f"ids_{i}"].tolist() for i in range(len(rows))]


def test_detokenize_drops_special_and_unknown_ids(reference):
    tokenizer = T5Tokenizer(
        t5_tokenizer.spiece_proto(FIXTURES / "tiny_t5_hf" / "spiece.model", 4)
    )
    ids = reference["ids_2"].tolist()  # "Das ist doch nicht möglich." + "</s>"
    assert tokenizer.detokenize([0, *ids, 210, 215]) == "Das ist doch nicht möglich."
    assert tokenizer.vocabulary_size() == 204  # the model has 216 rows


def test_generate_takes_and_returns_text(loaded, reference):
    _, model = loaded
    out = model.generate(["translate English to German: That is not possible."], 6)
    assert len(out) == 1 and isinstance(out[0], str)


@pytest.mark.parametrize(
    "options",
    [
        dict(sampler="random", seed=3),
        dict(sampler="top_k", top_k=5, seed=3),
        dict(sampler="top_p", top_p=0.9, seed=3, temperature=0.7),
    ],
    ids=["random", "top_k", "top_p"],
)
def test_seeded_sampling_repeats_and_differs_from_greedy(loaded, reference, options):
    prefix, model = loaded
    rows = [list(row[row != 0]) for row in reference[prefix + "source_ids"]]
    first = model.generate(rows, 10, stop_token_ids=[], **options)
    again = model.generate(rows, 10, stop_token_ids=[], **options)
    assert first == again
    assert all(0 <= t < model.backbone.vocabulary_size for r in first for t in r)
    assert first != reference[prefix + "greedy"].tolist()


# The decoding machinery below (beam search, streaming, the exported
# signatures) is the same code for both shapes, whose differences (activation,
# head, scaling) the logits and greedy tests above pin on each: each runs on
# one shape, as compiling its loops for both doubled the file's time.
@pytest.fixture(scope="module")
def v1_1():
    return "v1_1_", load_hf_t5(FIXTURES / SHAPES["v1_1_"])


def test_beam_search_runs_and_width_one_is_greedy(v1_1, reference):
    prefix, model = v1_1
    rows = [list(row[row != 0]) for row in reference[prefix + "source_ids"]]
    greedy = reference[prefix + "greedy"].tolist()
    one = model.generate(rows, 10, sampler="beam", num_beams=1, stop_token_ids=[])
    assert one == greedy
    four = model.generate(rows, 10, sampler="beam", num_beams=4, stop_token_ids=[])
    assert [len(r) for r in four] == [10, 10]
    # Beam search finds a sequence at least as likely as greedy's.
    best, _ = model.score(rows, four)
    baseline, _ = model.score(rows, greedy)
    assert np.all(best >= baseline - 1e-4)


def test_streamed_pieces_join_to_the_whole(v1_1):
    _, model = v1_1
    source = "summarize: The house is small, but the garden is large."
    whole = model.generate([source], 8)[0]
    pieces = list(model.generate([source], 8, stream=True))
    joined = "".join(p if isinstance(p, str) else p[0] for p in pieces)
    assert joined.strip() == whole.strip()


@pytest.mark.slow  # a SavedModel export and its reload
def test_translate_signatures_give_the_python_texts(reference):
    # A model of this test's own: TensorFlow resources (the SentencePiece
    # op) do not outlive conftest's `clear_session`. On T5's shape only
    # (see above): the signatures trace the same loops for both.
    model = load_hf_t5(FIXTURES / SHAPES["t5_"])
    signatures = translate_signatures.translate_signatures(model, max_new_tokens=6)
    sources = texts(reference)[:2]
    got = signatures["translate"](tf.constant(sources))["texts"].numpy()
    assert [t.decode("utf-8") for t in got] == model.generate(sources, 6)
    beam = signatures["translate_with_options"](
        tf.constant(sources), tf.constant(6), tf.constant(4), tf.constant(0.0)
    )["texts"].numpy()
    want = model.generate(sources, 6, sampler="beam", num_beams=4)
    assert [t.decode("utf-8") for t in beam] == want


@pytest.mark.parametrize("mode", ["bfloat16", "int8"])
def test_weights_cast_or_quantized_keep_the_bias_tables_float(reference, mode):
    model = load_hf_t5(FIXTURES / "tiny_t5_v1_1_hf")
    if mode == "bfloat16":
        model.cast_weights(mode)
    else:
        model.quantize(mode)
    assert np.all(np.isfinite(logits_of(model, reference, "v1_1_")))
    table = model.backbone.encoder_relative_position_bias.embeddings
    assert table.dtype == "float32"


def test_save_round_trip_is_identical(loaded, reference, tmp_path):
    prefix, model = loaded
    folder = save_hf_t5(model, tmp_path / "saved")
    again = load_hf_t5(folder)
    np.testing.assert_array_equal(
        logits_of(again, reference, prefix), logits_of(model, reference, prefix)
    )
    for i, text in enumerate(texts(reference)):
        assert (
            np.asarray(again.tokenizer(text)).tolist() == reference[f"ids_{i}"].tolist()
        )
    # The written tensors are the checkpoint's, by name, shape and value
    # (transformers 5 writes neither copy of a tied embedding).
    ours, theirs = tensors_of(folder), tensors_of(FIXTURES / SHAPES[prefix])
    assert {n: v.shape for n, v in ours.items()} == {
        n: v.shape for n, v in theirs.items()
    }
    for name, value in theirs.items():
        np.testing.assert_array_equal(ours[name], value, err_msg=name)
    config = json.loads((folder / "config.json").read_text())
    assert config["tie_word_embeddings"] is model.tie_word_embeddings
    assert config["scale_decoder_outputs"] is model.scale_decoder_outputs


@pytest.mark.parametrize(
    "shape, edit",
    [
        # transformers 4's configs: tying and scaling both read from
        # tie_word_embeddings (FLAN-T5 on the hub says false).
        ("v1_1_", {"tie_word_embeddings": False, "scale_decoder_outputs": None}),
        ("t5_", {"tie_word_embeddings": None, "scale_decoder_outputs": None}),
    ],
)
def test_transformers_4_configs_read_alike(reference, tmp_path, shape, edit):
    folder = tmp_path / "old"
    shutil.copytree(FIXTURES / SHAPES[shape], folder)
    config = json.loads((folder / "config.json").read_text())
    for key, value in edit.items():
        config.pop(key, None)
        if value is not None:
            config[key] = value
    (folder / "config.json").write_text(json.dumps(config))
    model = load_hf_t5(folder)
    gap = np.abs(logits_of(model, reference, shape) - reference[shape + "logits"])
    assert gap.max() / np.ptp(reference[shape + "logits"]) < 1e-4


def test_equal_copies_of_the_embedding_are_accepted(reference, tmp_path):
    folder = tmp_path / "copies"
    shutil.copytree(FIXTURES / "tiny_t5_hf", folder)
    tensors = load_file(str(folder / "model.safetensors"))
    for name in ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight",
                 "lm_head.weight"):  # fmt: skip
        tensors[name] = tensors["shared.weight"]
    save_file(tensors, str(folder / "model.safetensors"), {"format": "pt"})
    model = load_hf_t5(folder)
    assert model.tie_word_embeddings
    gap = np.abs(logits_of(model, reference, "t5_") - reference["t5_logits"])
    assert gap.max() / np.ptp(reference["t5_logits"]) < 1e-4


def _edited_folder(tmp_path, config_edit=None, tensors_edit=None):
    folder = tmp_path / "edited"
    shutil.copytree(FIXTURES / "tiny_t5_hf", folder)
    if config_edit:
        config = json.loads((folder / "config.json").read_text())
        config.update(config_edit)
        (folder / "config.json").write_text(json.dumps(config))
    if tensors_edit:
        tensors = load_file(str(folder / "model.safetensors"))
        tensors_edit(tensors)
        save_file(tensors, str(folder / "model.safetensors"), {"format": "pt"})
    return folder


@pytest.mark.parametrize(
    "config_edit, tensors_edit, message",
    [
        ({"model_type": "mt5"}, None, r"Only T5 checkpoints.*model_type='mt5'"),
        ({"feed_forward_proj": "gated-tanh"}, None, "feed_forward_proj"),
        ({"pad_token_id": 5}, None, r"pad_token_id=5 is not the tokenizer's id 0"),
        ({"vocab_size": 100}, None, "more tokens"),
        (None, lambda t: t.pop("decoder.block.2.layer.2.DenseReluDense.wo.weight"),
         r"lacks 1 weights.*DenseReluDense\.wo"),
        (None, lambda t: t.update(
            {"encoder.embed_tokens.weight": t["shared.weight"] + 1}
        ), "differs from shared.weight"),
        (None, lambda t: t.update({"classifier.weight": t["shared.weight"]}),
         "no place for"),
    ],
)  # fmt: skip
def test_unsupported_or_damaged_checkpoints_raise(
    tmp_path, config_edit, tensors_edit, message
):
    folder = _edited_folder(tmp_path, config_edit, tensors_edit)
    with pytest.raises(ValueError, match=message):
        load_hf_t5(folder)


def test_a_folder_without_tokenizer_files_raises(tmp_path):
    folder = _edited_folder(tmp_path)
    (folder / "spiece.model").unlink()
    (folder / "tokenizer.json").unlink()
    with pytest.raises(ValueError, match="needs spiece.model or tokenizer.json"):
        load_hf_t5(folder)


def test_saving_a_model_t5_cannot_hold_raises(tmp_path):
    from tests.builders import seq2seq_lm

    model = seq2seq_lm(
        vocabulary_size=20, num_encoder_layers=1, num_decoder_layers=1,
        num_heads=2, hidden_dim=8, intermediate_dim=16, max_sequence_length=8,
    )  # fmt: skip
    with pytest.raises(ValueError, match=r"needs position_encoding='relative'"):
        save_hf_t5(model, tmp_path / "x")


@pytest.mark.parametrize("module", [hf_t5, t5_tokenizer])
def test_docstring_examples(module):
    result = doctest.testmod(
        module,
        extraglobs={"np": np, "keras_tfm": keras_tfm, "FIXTURES": FIXTURES},
        optionflags=doctest.NORMALIZE_WHITESPACE,
    )
    assert result.attempted > 0 and result.failed == 0

"""load_hf_marian against transformers' MarianMTModel and MarianTokenizer.

The references were made once by tools/make_hf_marian_fixture.py (torch
2.13.0, transformers 5.23.0) from the committed tiny random checkpoint.
"""

import doctest

import keras
import numpy as np
import pytest
import tensorflow as tf
from safetensors.numpy import load_file

import keras_tfm
from keras_tfm.convert import MarianTokenizer, load_hf_marian
from keras_tfm.convert import marian as hf_marian
from keras_tfm.layers import PositionalEncoding
from keras_tfm.models import Seq2SeqLM
from keras_tfm.models.legacy_configs import flat_arguments
from keras_tfm.tokenizers import marian_tokenizer
from tests.convert import decoder_checks as checks

FIXTURE = checks.FIXTURES / "tiny_marian_hf"
PAD = 357  # "<pad>" in the fixture's vocab.json: padding and decoder start


@pytest.fixture(scope="module")
def model():
    return load_hf_marian(FIXTURE)


@pytest.fixture(scope="module")
def reference():
    return checks.reference("marian")


def fresh_tokenizer():
    """A tokenizer of this test's own: TensorFlow resources (SentencePiece
    ops, lookup tables) do not outlive conftest's `clear_session`."""
    files = [FIXTURE / name for name in ("source.spm", "target.spm", "vocab.json")]
    return MarianTokenizer(*files)


def test_config_is_the_checkpoints(model):
    config = flat_arguments(model)
    want = dict(
        vocabulary_size=358,
        num_encoder_layers=2,
        num_decoder_layers=2,
        num_heads=4,
        hidden_dim=32,
        intermediate_dim=64,
        max_sequence_length=64,
        activation="silu",
        normalize_first=False,
        position_encoding="sinusoidal_split",
        use_bias=True,
        tie_word_embeddings=True,
        scale_embeddings=True,
        use_logits_bias=True,
        padding_id=PAD,
    )
    assert {k: config[k] for k in want} == want
    assert isinstance(model.tokenizer, MarianTokenizer)
    tokenizer = model.tokenizer
    assert (tokenizer.start_token_id, tokenizer.end_token_id) == (PAD, 0)


def test_token_ids_equal_transformers(model, reference):
    # Unknown characters, NFKC folding, a language code, runs of spaces.
    checks.check_token_ids(model, reference)


def test_token_ids_in_tf_data_equal_transformers(reference):
    texts = [str(t) for t in reference["texts"]]
    dataset = tf.data.Dataset.from_tensor_slices(texts).batch(4).map(fresh_tokenizer())
    rows = [row for batch in dataset for row in batch.to_list()]
    assert rows == [reference[f"ids_{i}"].tolist() for i in range(len(texts))]


def test_detokenize_equals_transformers_decode(model, reference):
    for i in range(len(reference["texts"])):
        ids = reference[f"target_ids_{i}"].tolist()
        want = str(reference[f"decoded_{i}"])
        assert model.tokenizer.detokenize(ids) == want
    batch = [reference[f"target_ids_{i}"].tolist() for i in range(3)]
    dataset = tf.data.Dataset.from_tensor_slices(tf.ragged.constant(batch))
    got = [t.numpy().decode() for t in dataset.map(fresh_tokenizer().detokenize)]
    assert got == [str(reference[f"decoded_{i}"]) for i in range(3)]


def test_encoder_outputs_and_logits_equal_transformers(model, reference):
    source = reference["source_ids"]
    assert (source == PAD).any()  # the shorter source is padded
    encoded = np.asarray(model.backbone.encode(source))
    np.testing.assert_allclose(encoded, reference["encoder_outputs"], atol=1e-4)
    logits = np.asarray(
        model({"source_ids": source, "target_ids": reference["decoder_input_ids"]})
    )
    np.testing.assert_allclose(logits, reference["logits"], atol=1e-4, rtol=0)
    # transformers' own float32 rounding on this checkpoint is far below 1e-4.
    assert reference["float64_gap"] < 2e-5


def test_interleaved_positions_would_not_match(model, reference):
    interleaved = Seq2SeqLM.from_config(
        {**flat_arguments(model), "position_encoding": "sinusoidal", "tokenizer": None}
    )
    interleaved.set_weights(model.get_weights())
    inputs = {
        "source_ids": reference["source_ids"],
        "target_ids": reference["decoder_input_ids"],
    }
    gap = np.abs(np.asarray(interleaved(inputs)) - reference["logits"])
    assert gap.max() > 1e-2


def _greedy_rows(reference):
    """transformers' outputs without the start token, cut after "</s>"."""
    rows = []
    for row in reference["greedy"][:, 1:].tolist():
        rows.append(row[: row.index(0) + 1] if 0 in row else row)
    return rows


def test_greedy_translation_equals_transformers(model, reference):
    sources = [row[row != PAD].tolist() for row in reference["source_ids"]]
    new = reference["greedy"].shape[1] - 1
    got = model.generate(sources, max_new_tokens=new, sampler="greedy")
    assert got == _greedy_rows(reference)
    # The same from the texts, through the attached tokenizer.
    texts = [str(reference["texts"][3]), str(reference["texts"][0])]
    translations = model.generate(texts, max_new_tokens=new)
    assert translations == model.tokenizer.detokenize(got)


def test_greedy_stops_at_a_stop_token(model, reference):
    sources = [row[row != PAD].tolist() for row in reference["source_ids"]]
    want = _greedy_rows(reference)
    stop = want[1][2]  # a token the second row produces third
    got = model.generate(sources, max_new_tokens=12, stop_token_ids=[stop])
    for row, full in zip(got, want, strict=True):
        assert row == (full[: full.index(stop) + 1] if stop in full else full)


def test_cache_equals_full_pass(model, reference):
    source, target = reference["source_ids"], reference["decoder_input_ids"]
    full = np.asarray(model({"source_ids": source, "target_ids": target}))
    cross = model.compute_cross_attention_cache(model.backbone.encode(source))
    cache = model.empty_cache(len(target), target.shape[1])
    mask = source != PAD
    steps, index = [target[:, :3]], 0
    steps += [target[:, i : i + 1] for i in range(3, target.shape[1])]
    outputs = []
    for step in steps:
        logits, cache = model.call_with_cache(step, cache, index, cross, mask)
        outputs.append(np.asarray(logits))
        index += step.shape[1]
    checks.assert_equal_to_float32_rounding(np.concatenate(outputs, 1), full)


def test_saved_keras_model_keeps_the_tokenizer(model, reference, tmp_path):
    path = str(tmp_path / "marian.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert isinstance(loaded.tokenizer, MarianTokenizer)
    checks.check_token_ids(loaded, reference)
    inputs = {
        "source_ids": reference["source_ids"],
        "target_ids": reference["decoder_input_ids"],
    }
    np.testing.assert_array_equal(np.asarray(loaded(inputs)), np.asarray(model(inputs)))
    assert loaded.tokenizer.detokenize([5, 6, 0]) == model.tokenizer.detokenize(
        [5, 6, 0]
    )


def test_untied_head_is_read_from_lm_head(reference, tmp_path):
    # lm_head = 2 E: logits = 2 (reference - bias) + bias.
    tensors = load_file(str(FIXTURE / "model.safetensors"))
    head = 2 * tensors["model.shared.weight"]
    folder = checks.copy_fixture("marian", tmp_path, add={"lm_head.weight": head})
    checks.edit_json(folder, "config.json", tie_word_embeddings=False)
    untied = load_hf_marian(folder)
    assert untied.lm_head is not None
    bias = tensors["final_logits_bias"][0]
    logits = untied(
        {
            "source_ids": reference["source_ids"],
            "target_ids": reference["decoder_input_ids"],
        }
    )
    want = 2 * (reference["logits"] - bias) + bias
    np.testing.assert_allclose(np.asarray(logits), want, atol=2e-4, rtol=0)


def test_copies_of_the_shared_tables_are_accepted_when_equal(reference, tmp_path):
    tensors = load_file(str(FIXTURE / "model.safetensors"))
    shared = tensors["model.shared.weight"]
    table = np.asarray(
        PositionalEncoding(interleave=False).encoding(np.zeros((1, 64, 32)))
    )
    copies = {
        "model.encoder.embed_tokens.weight": shared,
        "model.decoder.embed_tokens.weight": shared,
        "lm_head.weight": shared,
        "model.encoder.embed_positions.weight": table,
        "model.decoder.embed_positions.weight": table,
    }
    folder = checks.copy_fixture("marian", tmp_path, add=copies)
    checks.check_same_weights(load_hf_marian(folder), load_hf_marian(FIXTURE))


@pytest.mark.parametrize(
    "add, message",
    [
        ({"lm_head.weight": "double"}, "lm_head.weight differs from shared.weight"),
        ({"model.decoder.embed_positions.weight": "random"}, "decoder.embed_pos"),
        ({"model.encoder.layers.0.extra.weight": "random"}, "extra.weight"),
    ],
)
def test_differing_copies_and_unknown_tensors_raise(tmp_path, add, message):
    shared = load_file(str(FIXTURE / "model.safetensors"))["model.shared.weight"]
    values = {"double": 2 * shared, "random": np.ones((64, 32), "float32")}
    folder = checks.copy_fixture(
        "marian", tmp_path, add={k: values[v] for k, v in add.items()}
    )
    with pytest.raises(ValueError, match=message):
        load_hf_marian(folder)


def test_missing_and_misshapen_tensors_raise(tmp_path):
    folder = checks.copy_fixture(
        "marian", tmp_path, drop="model.decoder.layers.1.encoder_attn.v_proj.bias"
    )
    with pytest.raises(ValueError, match=r"lacks 1 weights.*encoder_attn\.v_proj"):
        load_hf_marian(folder)
    folder = checks.copy_fixture(
        "marian",
        tmp_path / "b",
        add={"model.encoder.layers.0.fc1.weight": np.zeros((48, 32), "float32")},
    )
    with pytest.raises(ValueError, match=r"encoder\.layers\.0\.fc1\.weight"):
        load_hf_marian(folder)
    folder = checks.copy_fixture(
        "marian", tmp_path / "c", add={"final_logits_bias": np.zeros((1, 9), "float32")}
    )
    with pytest.raises(ValueError, match=r"final_logits_bias.*\(1, 9\)"):
        load_hf_marian(folder)


@pytest.mark.parametrize(
    "edit, message",
    [
        ({"model_type": "bart"}, "model_type='bart'"),
        ({"activation_function": "tanh"}, "activation_function='tanh'"),
        ({"normalize_before": True}, "normalize_before=True"),
        ({"add_final_layer_norm": True}, "add_final_layer_norm=True"),
        ({"normalize_embedding": True}, "normalize_embedding=True"),
        ({"static_position_embeddings": False}, "static_position_embeddings"),
        ({"share_encoder_decoder_embeddings": False}, "share_encoder_decoder"),
        ({"decoder_attention_heads": 2}, "decoder_attention_heads=2"),
        ({"decoder_ffn_dim": 32}, "decoder_ffn_dim=32"),
        ({"decoder_vocab_size": 400}, "decoder_vocab_size=400"),
        ({"pad_token_id": None}, "pad_token_id"),
        ({"decoder_start_token_id": 0}, "decoder_start_token_id=0"),
        ({"vocab_size": 400, "decoder_vocab_size": 400}, "vocab_size=400"),
    ],
)
def test_unsupported_configs_raise(tmp_path, edit, message):
    folder = checks.copy_fixture("marian", tmp_path)
    checks.edit_json(folder, "config.json", **edit)
    with pytest.raises(ValueError, match=message):
        load_hf_marian(folder)


def test_pickled_checkpoints_are_refused(tmp_path):
    folder = checks.copy_fixture("marian", tmp_path)
    (folder / "model.safetensors").unlink()
    (folder / "pytorch_model.bin").write_bytes(b"not even read")
    with pytest.raises(ValueError, match="pytorch_model.bin.*execute arbitrary code"):
        load_hf_marian(folder)


def test_missing_or_separate_tokenizer_files_raise(tmp_path):
    folder = checks.copy_fixture("marian", tmp_path)
    (folder / "target.spm").unlink()
    with pytest.raises(ValueError, match=r"without \['target.spm'\]"):
        load_hf_marian(folder)
    folder = checks.copy_fixture("marian", tmp_path / "b")
    checks.edit_json(folder, "tokenizer_config.json", separate_vocabs=True)
    with pytest.raises(ValueError, match="separate_vocabs=True"):
        load_hf_marian(folder)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"sequence_length": 8}, "sequence_length=8"),
        ({"unk_token": "<oov>"}, "lacks '<oov>'"),
    ],
)
def test_tokenizer_bad_arguments_raise(kwargs, message):
    files = [FIXTURE / name for name in ("source.spm", "target.spm", "vocab.json")]
    with pytest.raises(ValueError, match=message):
        MarianTokenizer(*files, **kwargs)


def test_tokenizer_config_round_trip_needs_its_assets(tmp_path):
    tokenizer = fresh_tokenizer()
    tokenizer.save_assets(str(tmp_path))
    assert sorted(p.name for p in tmp_path.iterdir()) == tokenizer.file_assets
    again = MarianTokenizer.from_config(tokenizer.get_config())
    with pytest.raises(ValueError, match="has no vocabulary"):
        again("Das ist")
    again.load_assets(str(tmp_path))
    assert again("Das ist gut.").tolist() == tokenizer("Das ist gut.").tolist()


@pytest.mark.parametrize("module", [hf_marian, marian_tokenizer])
def test_docstring_examples(module):
    result = doctest.testmod(
        module,
        extraglobs={"np": np, "keras_tfm": keras_tfm, "FIXTURES": checks.FIXTURES},
        optionflags=doctest.NORMALIZE_WHITESPACE,
    )
    assert result.attempted > 0 and result.failed == 0

"""`.keras` files saved before the Backbone/Task split still load, unchanged.

The fixtures were saved by the code before the split, with the outputs that
code gave (tools/make_legacy_fixtures.py, run on commit a0892ae).
"""

import json
from pathlib import Path

import keras
import numpy as np
import pytest

import keras_tfm
from keras_tfm.legacy_files import is_legacy_config

FIXTURES = Path(__file__).parents[1] / "fixtures" / "legacy"
EXPECTED = json.loads((FIXTURES / "expected.json").read_text())
IDS = np.array([[5, 6, 7, 8]])


def test_an_old_causal_lm_loads_with_identical_logits_and_text():
    model = keras_tfm.saving.load_model(FIXTURES / "causal_lm.keras")
    assert isinstance(model, keras_tfm.models.CausalLM)
    assert isinstance(model.backbone, keras_tfm.models.DecoderBackbone)
    # Within float32 rounding: saved on another CPU, whose kernels sum in
    # another order (this one's oneDNN with AMX differs in the last bit).
    np.testing.assert_allclose(
        np.asarray(model(IDS)), np.asarray(EXPECTED["causal_logits"], "float32"),
        rtol=1e-6, atol=1e-6,
    )  # fmt: skip
    assert model.generate("in the", max_new_tokens=6) == EXPECTED["causal_text"]


def test_an_old_seq2seq_transformer_loads_as_a_seq2seq_lm():
    model = keras_tfm.saving.load_model(FIXTURES / "seq2seq_transformer.keras")
    assert isinstance(model, keras_tfm.models.Seq2SeqLM)
    logits = model({"source_ids": IDS, "target_ids": IDS[:, :2]})
    # Within float32 rounding, as above (an AVX2-only CPU differs by 6e-8).
    np.testing.assert_allclose(
        np.asarray(logits), np.asarray(EXPECTED["seq2seq_logits"], "float32"),
        rtol=1e-6, atol=1e-6,
    )  # fmt: skip
    assert model.generate("ich habe", max_new_tokens=6) == EXPECTED["seq2seq_text"]


def test_a_resaved_old_model_is_a_current_file(tmp_path):
    model = keras_tfm.saving.load_model(FIXTURES / "causal_lm.keras")
    model.save(tmp_path / "new.keras")
    again = keras.saving.load_model(tmp_path / "new.keras")
    np.testing.assert_array_equal(np.asarray(again(IDS)), np.asarray(model(IDS)))
    assert not is_legacy_config(
        json.loads(json.dumps(keras.saving.serialize_keras_object(again)))
    )


def test_weights_that_do_not_fit_name_the_missing_paths(tmp_path):
    from keras_tfm.legacy_files import remap_weights

    small = keras_tfm.models.CausalLM(
        keras_tfm.models.DecoderBackbone(
            vocabulary_size=10, num_layers=1, num_heads=2, hidden_dim=8,
            intermediate_dim=16, max_sequence_length=8,
        )
    )  # fmt: skip
    small.save_weights(tmp_path / "small.weights.h5")
    untied = keras_tfm.models.CausalLM(small.backbone, tie_word_embeddings=False)
    with pytest.raises(ValueError, match="not in the old file"):
        remap_weights(tmp_path / "small.weights.h5", untied, tmp_path / "out.h5")

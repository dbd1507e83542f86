"""Every keras-tfm object loads with Keras' safe_mode=True; no pickle anywhere."""

import io
import re
import zipfile
from pathlib import Path

import h5py
import keras
import keras_hub
import numpy as np
import pytest

import keras_tfm
from keras_tfm import models, saving, zoo

PACKAGE = Path(keras_tfm.__file__).resolve().parent


def ids(*shape):
    return np.random.default_rng(0).integers(1, 60, size=shape).astype("int32")


def causal_lm():
    model = zoo.from_preset(
        "gpt_nano", num_layers=1, hidden_dim=16, intermediate_dim=32, num_heads=2,
        max_sequence_length=16, tokenizer=keras_hub.tokenizers.ByteTokenizer(),
    )  # fmt: skip
    return model, ids(2, 8)


def seq2seq():
    model = zoo.from_preset("transformer_tiny", max_sequence_length=16)
    return model, {"source_ids": ids(2, 6), "target_ids": ids(2, 5)}


def classifier():
    backbone = zoo.from_preset("bert_tiny_test")
    return models.EncoderClassifier(backbone=backbone, num_classes=3), ids(2, 8)


def masked_lm():
    backbone = zoo.from_preset("bert_tiny_test")
    model = models.MaskedLanguageModel(backbone=backbone)
    inputs = {"token_ids": ids(2, 8), "mask_positions": np.array([[1, 2]] * 2)}
    return model, inputs


@pytest.mark.parametrize("family", [causal_lm, seq2seq, classifier, masked_lm])
def test_keras_round_trip_in_safe_mode(family, tmp_path):
    model, inputs = family()
    expected = keras.ops.convert_to_numpy(model(inputs))
    path = tmp_path / "model.keras"
    model.save(path)
    # safe_mode=True (the default) refuses lambdas and arbitrary code.
    loaded = keras.saving.load_model(path, safe_mode=True)
    assert type(loaded) is type(model)
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(loaded(inputs)), expected, atol=1e-5
    )


@pytest.mark.parametrize("name", ["../zoo/gpt_nano", "/etc", "gpt_nano/../gpt_nano"])
def test_a_path_is_never_read_as_an_installed_preset(name, tmp_path, monkeypatch):
    # A path names a folder where the caller stands, not a zoo entry: the
    # installed zoo's gpt_nano is not reached through one.
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="No preset folder at"):
        zoo.from_preset(name)


def saved_tiny_model(tmp_path):
    model, inputs = causal_lm()
    model(inputs)
    path = tmp_path / "model.keras"
    model.save(path)
    return path


def test_a_damaged_byte_inside_a_keras_file_is_caught(tmp_path):
    path = saved_tiny_model(tmp_path)
    with zipfile.ZipFile(path) as archive:
        member = archive.getinfo("model.weights.h5")
    data = bytearray(path.read_bytes())
    # Flip bytes in the middle of the (stored, uncompressed) weights member.
    middle = member.header_offset + 100 + member.compress_size // 2
    data[middle : middle + 8] = bytes(255 - b for b in data[middle : middle + 8])
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="truncated or corrupt.*fails its CRC"):
        saving.load_model(path)


def test_a_zip_that_is_not_a_keras_file_is_named(tmp_path):
    path = tmp_path / "other.keras"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("notes.txt", "hello")
    with pytest.raises(ValueError, match="no config.json"):
        saving.load_model(path)


def test_a_whole_file_loads_through_the_checking_loader(tmp_path):
    path = saved_tiny_model(tmp_path)
    loaded = saving.load_model(path)
    assert type(loaded) is models.CausalLM
    assert saving.check_model_file(path) == path


def test_no_pickle_or_marshal_in_the_package():
    pattern = re.compile(
        r"^\s*(import|from)\s+(pickle|cPickle|dill|marshal|cloudpickle|joblib)\b"
        r"|\b(pickle|marshal|dill|cloudpickle)\.(loads?|dumps?)\b"
        r"|allow_pickle\s*=\s*True|safe_mode\s*=\s*False",
        re.MULTILINE,
    )
    offenders = [
        f"{path.relative_to(PACKAGE)}: {match.group(0).strip()}"
        for path in PACKAGE.rglob("*.py")
        for match in pattern.finditer(path.read_text(encoding="utf-8"))
    ]
    assert not offenders, offenders


def weight_groups(keras_file):
    """The top-level groups of the weights inside a `.keras` archive."""
    with zipfile.ZipFile(keras_file) as archive:
        data = io.BytesIO(archive.read("model.weights.h5"))
    with h5py.File(data, "r") as weights:
        return set(weights)


def test_a_keras_file_without_the_optimizer_is_the_uncompiled_model(tmp_path):
    model, inputs = causal_lm()
    model.compile(optimizer="adam", loss=keras_tfm.training.TokenCrossEntropy())
    model.fit(inputs, inputs, epochs=1, verbose=0)  # Adam's two moments exist
    whole = saving.atomic_save(model, tmp_path / "whole.keras")
    lean = saving.atomic_save(model, tmp_path / "lean.keras", include_optimizer=False)
    assert "optimizer" in weight_groups(whole)  # Adam's iterations and moments
    assert "optimizer" not in weight_groups(lean)
    loaded = saving.load_model(lean)
    assert getattr(loaded, "optimizer", None) is None
    assert isinstance(loaded.tokenizer, keras_hub.tokenizers.ByteTokenizer)
    np.testing.assert_array_equal(np.asarray(loaded(inputs)), np.asarray(model(inputs)))
    # The overrides replace configuration entries of the copy only.
    copy = saving.uncompiled_copy(model, name="renamed")
    assert copy.name == "renamed" and model.name != "renamed"

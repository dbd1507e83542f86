import json
import os
import warnings

import h5py
import keras
import keras_hub
import numpy as np
import pytest

from keras_tfm import zoo
from keras_tfm.zoo import catalogue
from tests.builders import causal_lm


@keras.saving.register_keras_serializable(package="keras_tfm")
class ZooTestFunctional(keras.Model):
    """Built by its constructor, like a keras-hub backbone."""

    def __init__(self, hidden_dim, dropout=0.0, **kwargs):
        inputs = keras.Input((4,))
        hidden = keras.layers.Dense(hidden_dim, name="dense")(inputs)
        outputs = keras.layers.Dropout(dropout)(hidden)
        super().__init__(inputs, outputs, **kwargs)
        self.hidden_dim = hidden_dim
        self.dropout = dropout

    def get_config(self):
        return {
            "hidden_dim": self.hidden_dim,
            "dropout": self.dropout,
            "name": self.name,
        }


@keras.saving.register_keras_serializable(package="keras_tfm")
class ZooTestWrapper(keras.Model):
    """Holds a nested backbone, serialized as {"class_name", "config"}."""

    def __init__(self, backbone, num_classes, **kwargs):
        inputs = keras.Input((4,))
        outputs = keras.layers.Dense(num_classes, name="head")(backbone(inputs))
        super().__init__(inputs, outputs, **kwargs)
        self.backbone = backbone
        self.num_classes = num_classes

    def get_config(self):
        return {
            "backbone": keras.saving.serialize_keras_object(self.backbone),
            "num_classes": self.num_classes,
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["backbone"] = keras.saving.deserialize_keras_object(config["backbone"])
        return cls(**config)


@keras.saving.register_keras_serializable(package="keras_tfm")
class ZooTestLazy(keras.Model):
    """A subclassed model with no variables until built."""

    def __init__(self, units, **kwargs):
        super().__init__(**kwargs)
        self.units = units
        self.dense = keras.layers.Dense(units)

    def build(self, input_shape):
        self.dense.build(input_shape)

    def call(self, inputs):
        return self.dense(inputs)

    def get_config(self):
        return {"units": self.units}


@keras.saving.register_keras_serializable(package="keras_tfm")
class ZooTestTokenized(keras.Model):
    """Carries a keras-hub tokenizer whose vocabulary is an asset."""

    def __init__(self, vocabulary_size, tokenizer=None, **kwargs):
        inputs = keras.Input((3,), dtype="int32")
        outputs = keras.layers.Embedding(vocabulary_size, 2)(inputs)
        super().__init__(inputs, outputs, **kwargs)
        self.vocabulary_size = vocabulary_size
        if isinstance(tokenizer, dict):
            tokenizer = keras.saving.deserialize_keras_object(tokenizer)
        self.tokenizer = tokenizer

    def get_config(self):
        return {
            "vocabulary_size": self.vocabulary_size,
            "tokenizer": keras.saving.serialize_keras_object(self.tokenizer),
        }


CARD_TEXTS = {
    "description": "A test model.",
    "intended_use": "Tests only.",
    "training_data": "None: random weights.",
    "training_command": "pytest tests/zoo",
}
X = np.random.default_rng(0).normal(size=(3, 4)).astype("float32")


def save(model, directory, **kwargs):
    return zoo.save_preset(model, directory, **CARD_TEXTS, **kwargs)


@pytest.fixture
def root(tmp_path):
    save(ZooTestFunctional(hidden_dim=8, name="mlp"), tmp_path / "mlp-small")
    backbone = ZooTestFunctional(hidden_dim=6)
    save(ZooTestWrapper(backbone, num_classes=3), tmp_path / "wrapped")
    (tmp_path / "not-a-preset").mkdir()  # no config.json
    (tmp_path / "notes.txt").write_text("ignored")
    return tmp_path


def test_list_presets_sorted_and_only_folders_with_config(root, tmp_path):
    assert zoo.list_presets(root=root) == ["mlp-small", "wrapped"]
    assert zoo.list_presets(root=tmp_path / "missing") == []


def test_from_preset_restores_the_saved_model(tmp_path):
    original = ZooTestWrapper(ZooTestFunctional(hidden_dim=6), num_classes=3)
    save(original, tmp_path / "wrapped")
    restored = zoo.from_preset("wrapped", root=tmp_path)
    assert isinstance(restored, ZooTestWrapper)
    assert isinstance(restored.backbone, ZooTestFunctional)
    np.testing.assert_array_equal(
        restored.predict(X, verbose=0), original.predict(X, verbose=0)
    )
    fresh = zoo.from_preset("wrapped", root=tmp_path, load_weights=False)
    assert not np.allclose(fresh.predict(X, verbose=0), original.predict(X, verbose=0))


def test_a_trained_model_is_saved_without_its_optimizer_state(tmp_path):
    model = ZooTestFunctional(hidden_dim=6)
    model.compile(optimizer="adam", loss="mse")
    model.fit(X, np.zeros((3, 6)), epochs=1, verbose=0)
    save(model, tmp_path / "trained")
    with h5py.File(tmp_path / "trained" / catalogue.WEIGHTS_FILE) as weights:
        assert "optimizer" not in weights
        saved = []
        weights.visit(saved.append)
    assert any(path.endswith("vars/0") for path in saved)
    restored = zoo.from_preset("trained", root=tmp_path)
    np.testing.assert_array_equal(
        restored.predict(X, verbose=0), model.predict(X, verbose=0)
    )


def test_float16_storage_halves_the_file_and_loads_the_rounded_weights(tmp_path):
    model = ZooTestFunctional(hidden_dim=4096)  # 80 kB of float32 weights
    save(model, tmp_path / "full")
    save(model, tmp_path / "half", weights_dtype="float16")
    sizes = [(tmp_path / name / catalogue.WEIGHTS_FILE).stat().st_size
             for name in ("full", "half")]  # fmt: skip
    assert sizes[1] < 0.6 * sizes[0]
    restored = zoo.from_preset("half", root=tmp_path)
    for original, loaded in zip(model.weights, restored.weights, strict=True):
        assert loaded.dtype == "float32"
        rounded = np.asarray(original).astype(np.float16).astype(np.float32)
        np.testing.assert_array_equal(np.asarray(loaded), rounded)
    # Rounded, not stored as trained: float16 cannot hold the random weights.
    kernel, loaded = np.asarray(model.weights[0]), np.asarray(restored.weights[0])
    assert not np.array_equal(kernel, loaded)
    assert "float16-rounded model weights" in zoo.preset_card("half", root=tmp_path)
    with pytest.raises(ValueError, match="weights_dtype"):
        save(model, tmp_path / "bad", weights_dtype="int8")


def test_overrides(root):
    model = zoo.from_preset("mlp-small", root=root, dropout=0.5)
    assert model.dropout == 0.5 and model.hidden_dim == 8
    with pytest.raises(ValueError, match=r"Unknown override\(s\) \['hiden_dim'\]"):
        zoo.from_preset("mlp-small", root=root, hiden_dim=4)
    # Keras warns about the skipped variables before raising.
    with pytest.raises(ValueError, match="do not fit"), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        zoo.from_preset("mlp-small", root=root, hidden_dim=5)


def test_unknown_name_lists_the_available_presets(root):
    with pytest.raises(ValueError, match=r"'gpt'.*\['mlp-small', 'wrapped'\]"):
        zoo.from_preset("gpt", root=root)
    with pytest.raises(ValueError, match="not-a-preset"):
        zoo.preset_card("not-a-preset", root=root)


@pytest.mark.parametrize(
    "name",
    ["../mlp-small", "..", "a/b", "a\\b", "/etc", ".hidden", "", "x..y", None, 3],
)
def test_catalogue_lookups_refuse_names_that_are_paths(root, name):
    with pytest.raises(ValueError, match="plain preset name"):
        zoo.preset_card(name, root=root)
    with pytest.raises(ValueError, match="plain preset name"):
        zoo.preset_dir(name, root=root)


@pytest.mark.parametrize(
    "name", [".hidden", "", "x..y", None, 3]
)
def test_from_preset_refuses_what_is_neither_a_name_nor_a_path(root, name):
    with pytest.raises(ValueError, match="plain preset name"):
        zoo.from_preset(name, root=root)


def test_from_preset_loads_a_saved_folder_by_its_path(root, monkeypatch):
    # A path is a folder, relative to the working directory, never an entry
    # of `root`: "../mlp-small" from inside `root` is no preset.
    expected = zoo.from_preset("mlp-small", root=root)(X)
    monkeypatch.chdir(root)
    for path in ("./mlp-small", root / "mlp-small", f"{root}/mlp-small"):
        np.testing.assert_allclose(zoo.from_preset(path)(X), expected, atol=0)
    for path in ("../mlp-small", "./not-a-preset", "./notes.txt", "."):
        with pytest.raises(ValueError, match="No preset folder at"):
            zoo.from_preset(path, root=root)
    # A plain name that is a folder here, not in the catalogue: say how.
    with pytest.raises(ValueError, match=r"loads by its path: './mlp-small'"):
        zoo.from_preset("mlp-small", root=root / "missing")


def test_refuses_a_symlink_leading_out_of_the_catalogue(root, tmp_path_factory):
    outside = tmp_path_factory.mktemp("outside")
    save(ZooTestFunctional(hidden_dim=2), outside / "evil")
    os.symlink(outside / "evil", root / "evil")
    with pytest.raises(ValueError, match="outside the catalogue"):
        zoo.from_preset("evil", root=root)


def test_preset_card_states_the_parameter_count_and_texts(root):
    card = zoo.preset_card("mlp-small", root=root)
    model = zoo.from_preset("mlp-small", root=root)
    assert f"| Parameters | {model.count_params():,} |" in card
    for text in CARD_TEXTS.values():
        assert text in card
    assert '`keras_tfm.zoo.from_preset("mlp-small")`' in card


def test_hand_written_config_with_short_nested_class_names(tmp_path):
    (tmp_path / "hand").mkdir()
    spec = {
        "class_name": "ZooTestWrapper",
        "config": {
            "backbone": {
                "class_name": "ZooTestFunctional",
                "config": {"hidden_dim": 5},
            },
            "num_classes": 2,
        },
    }
    (tmp_path / "hand" / "config.json").write_text(json.dumps(spec))
    model = zoo.from_preset("hand", root=tmp_path)
    assert model.predict(X, verbose=0).shape == (3, 2)
    assert model.backbone.hidden_dim == 5


def test_bad_config_files(tmp_path):
    for name, text in [
        ("unregistered", json.dumps({"class_name": "Dense", "config": {"units": 2}})),
        ("not-json", "{"),
        ("no-config", json.dumps({"class_name": "ZooTestLazy"})),
    ]:
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(text)
    with pytest.raises(ValueError, match="registered under package"):
        zoo.from_preset("unregistered", root=tmp_path)
    with pytest.raises(ValueError, match="not valid JSON"):
        zoo.from_preset("not-json", root=tmp_path)
    with pytest.raises(ValueError, match="class_name"):
        zoo.from_preset("no-config", root=tmp_path)


def test_lazy_model_is_built_from_build_config(tmp_path):
    original = ZooTestLazy(units=3)
    original(X)
    save(original, tmp_path / "lazy")
    restored = zoo.from_preset("lazy", root=tmp_path)
    assert restored.built
    np.testing.assert_array_equal(restored(X), original(X))


def test_tokenizer_assets_round_trip(tmp_path):
    vocabulary = ["[PAD]", "[UNK]", "the", "cat", "sat"]
    tokenizer = keras_hub.tokenizers.WordPieceTokenizer(vocabulary=vocabulary)
    save(ZooTestTokenized(5, tokenizer=tokenizer), tmp_path / "tok")
    restored = zoo.from_preset("tok", root=tmp_path)
    assert restored.tokenizer.get_vocabulary() == vocabulary
    ids = restored.tokenizer("the cat sat")
    assert keras.ops.convert_to_numpy(ids).tolist() == [2, 3, 4]


def test_save_preset_errors(tmp_path):
    plain = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    with pytest.raises(ValueError, match="registered under package"):
        save(plain, tmp_path / "plain")
    model = ZooTestFunctional(hidden_dim=2)
    save(model, tmp_path / "once")
    with pytest.raises(ValueError, match="overwrite=True"):
        save(model, tmp_path / "once")
    save(model, tmp_path / "once", overwrite=True)
    with pytest.raises(ValueError, match="plain preset name"):
        save(model, tmp_path / ".hidden")
    with pytest.raises(ValueError, match="intended_use"):
        zoo.save_preset(model, tmp_path / "x", **{**CARD_TEXTS, "intended_use": " "})
    with pytest.raises(ValueError, match="built"):
        save(ZooTestLazy(units=2), tmp_path / "unbuilt")


def test_config_only_preset(tmp_path):
    save(ZooTestFunctional(hidden_dim=2), tmp_path / "cfg", save_weights=False)
    assert not (tmp_path / "cfg" / "model.weights.h5").exists()
    assert "none (config only)" in zoo.preset_card("cfg", root=tmp_path)
    assert zoo.from_preset("cfg", root=tmp_path).hidden_dim == 2


def test_shipped_presets_are_well_formed():
    """Every preset in the installed zoo names a registered class and has a card."""
    classes = catalogue.registered_classes()
    for name in zoo.list_presets():
        assert "| Parameters |" in zoo.preset_card(name), name
        if zoo.preset_weights(name) == "pretrained":  # source.json: see its tests
            continue
        spec = json.loads((zoo.preset_dir(name) / "config.json").read_text())
        assert spec["class_name"].removeprefix("keras_tfm>") in classes, name


def test_round_trips_a_tiny_causal_lm(tmp_path):

    model = causal_lm(
        vocabulary_size=40,
        num_layers=1,
        num_heads=2,
        hidden_dim=16,
        intermediate_dim=32,
        max_sequence_length=12,
    )
    tokens = np.random.default_rng(1).integers(1, 40, size=(2, 6))
    save(model, tmp_path / "tiny-lm")
    restored = zoo.from_preset("tiny-lm", root=tmp_path, dropout=0.0)
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(restored(tokens)),
        keras.ops.convert_to_numpy(model(tokens)),
        atol=1e-6,
    )


@pytest.mark.parametrize(
    "name,suggested",
    [("kjv-gpt", ["kjv_gpt"]), ("KJV_GPT", ["kjv_gpt"]), ("gpt-nano", ["gpt_nano"]),
     ("smollm2", ["smollm2_135m_instruct"])],
)  # fmt: skip
def test_an_unknown_preset_suggests_the_near_miss(name, suggested):
    with pytest.raises(ValueError) as info:
        zoo.from_preset(name)
    message = str(info.value)
    assert message.startswith("Unknown preset. Did you mean ")
    hint = message.split("Did you mean ")[1].split("?")[0]
    assert all(repr(s) in hint for s in suggested)
    assert "load_model" not in message


def test_an_unknown_preset_far_from_any_gets_no_guess():
    with pytest.raises(ValueError, match=r"^Unknown preset\. Received: name='qqqq'"):
        zoo.from_preset("qqqq")


@pytest.mark.parametrize("name", ["model.keras", "/tmp/model.keras", "runs/lm.keras",
                                  "ckpt/model.safetensors"])  # fmt: skip
def test_a_file_path_given_as_a_preset_points_to_load_model(name):
    with pytest.raises(ValueError, match=r"keras_tfm\.saving\.load_model\(path\)"):
        zoo.from_preset(name)


def test_an_existing_folder_given_as_a_preset_points_to_the_loaders(
    tmp_path, monkeypatch
):
    (tmp_path / "my_checkpoint").mkdir()
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match=r"keras_tfm\.convert\.load_hf_\*"):
        zoo.from_preset("my_checkpoint")


def test_a_command_takes_a_preset_folder_and_suggests_close_names(root, monkeypatch):
    from keras_tfm.zoo.named_model import load_named_model

    monkeypatch.chdir(root)
    expected = zoo.from_preset("mlp-small", root=root)(X)
    np.testing.assert_allclose(load_named_model("./mlp-small")(X), expected, atol=0)
    with pytest.raises(ValueError, match=r"Did you mean 'kjv_gpt'\?"):
        load_named_model("kjvgpt")  # what `keras-tfm generate kjvgpt` says
    with pytest.raises(ValueError, match="No preset folder at './not-a-preset'"):
        load_named_model("./not-a-preset")

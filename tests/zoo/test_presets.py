"""The shipped catalogue: every preset builds, and its card states its size."""

import json
import re

import keras
import numpy as np
import pytest

from keras_tfm import zoo
from keras_tfm.models import (
    CausalLM,
    EncoderBackbone,
    EncoderClassifier,
    Seq2SeqLM,
    VisionTransformer,
)
from tests.zoo.parameter_count import parameter_count

BUILT_HERE = [n for n in zoo.list_presets() if zoo.preset_weights(n) != "pretrained"]

REQUIRED = [
    "transformer_base",
    "transformer_big",
    "bert_tiny",
    "bert_mini",
    "bert_small",
    "bert_base",
    "gpt_nano",
    "gpt_micro",
    "gpt_mini",
    "gpt_small",
    "gpt_tiny",
    "bert_tiny_test",
    "transformer_tiny",
]


def stated_parameters(name):
    match = re.search(r"\| Parameters \| ([\d,]+) \|", zoo.preset_card(name))
    assert match, f"the card of {name} states no parameter count"
    return int(match.group(1).replace(",", ""))


def test_the_catalogue_has_the_promised_presets():
    assert set(REQUIRED) <= set(zoo.list_presets())


# Presets converted from installed packages: tests/zoo/test_installed_checkpoints.py
@pytest.mark.parametrize("name", sorted(BUILT_HERE))
def test_card_states_the_parameter_count(name):
    # From the configuration by formula: no model is built (some have 200M).
    spec = json.loads((zoo.preset_dir(name) / "config.json").read_text())
    assert parameter_count(spec) == stated_parameters(name)


SMALL = dict(num_heads=4, hidden_dim=16, intermediate_dim=24, vocabulary_size=37)
VARIANTS = [
    (CausalLM, dict(num_layers=2, max_sequence_length=9)),
    (CausalLM, dict(num_layers=2, max_sequence_length=9, normalize_first=False)),
    (CausalLM, dict(num_layers=1, max_sequence_length=9, activation="swiglu",
                    normalization="rms_norm", num_key_value_heads=2,
                    position_encoding="rotary")),
    (CausalLM, dict(num_layers=1, max_sequence_length=9,
                    position_encoding="sinusoidal", num_key_value_heads=1)),
    (EncoderBackbone, dict(num_layers=2, max_sequence_length=9, num_segments=3)),
    (EncoderBackbone, dict(num_layers=2, max_sequence_length=9,  # pruned
                           num_heads_per_layer=[1, 3],
                           intermediate_dim_per_layer=[5, 24])),
    (EncoderBackbone, dict(num_layers=1, max_sequence_length=9, num_segments=0,
                           normalize_first=True, position_encoding="sinusoidal",
                           normalization="rms_norm", activation="swiglu")),
    (Seq2SeqLM, dict(num_encoder_layers=2, num_decoder_layers=1,
                              max_sequence_length=9)),
    (Seq2SeqLM, dict(num_encoder_layers=1, num_decoder_layers=2,
                              max_sequence_length=9, normalize_first=True,
                              position_encoding="learned", activation="swiglu",
                              normalization="rms_norm")),
]  # fmt: skip


@pytest.mark.parametrize("cls, config", VARIANTS)
def test_the_formula_counts_what_keras_builds(cls, config):
    # Small models of every option the formula knows, counted by Keras.
    model = cls.from_config({**SMALL, **config})  # a preset's flat arguments
    # get_config: the arguments with the defaults filled in (a task's
    # backbone arguments beside its own, as a preset lists them).
    config = model.get_config()
    if "backbone" in config:
        config = {**config.pop("backbone")["config"], **config}
    spec = {"class_name": cls.__name__, "config": config}
    assert parameter_count(spec) == model.count_params()


@pytest.mark.parametrize(
    "patches", [dict(patch_size=2), dict(patch_size=3, patch_stride=1)]
)
def test_the_formula_counts_a_vision_transformer(patches):
    config = dict(image_shape=[4, 6, 3], num_layers=2, num_heads=4, **patches,
                  hidden_dim=16, intermediate_dim=24, num_classes=7)  # fmt: skip
    model = VisionTransformer(**config)
    spec = {"class_name": "VisionTransformer", "config": model.get_config()}
    assert parameter_count(spec) == model.count_params()


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_the_formula_counts_a_classifier(pooling):
    backbone = EncoderBackbone(**SMALL, num_layers=1, max_sequence_length=9)
    model = EncoderClassifier(backbone, num_classes=5, pooling=pooling)
    config = {"num_classes": 5, "pooling": pooling,
              "backbone": {"config": backbone.get_config()}}  # fmt: skip
    spec = {"class_name": "EncoderClassifier", "config": config}
    assert parameter_count(spec) == model.count_params()


def test_published_sizes():
    # GPT-2 small has exactly 124,439,808 parameters; BERT-base 109,482,240
    # with its pooler (768 * 768 + 768 = 590,592), which ours keeps outside.
    assert stated_parameters("gpt_small") == 124_439_808
    assert stated_parameters("bert_base") + 590_592 == 109_482_240


def test_families_and_overrides():
    assert isinstance(zoo.from_preset("gpt_tiny"), CausalLM)
    assert isinstance(zoo.from_preset("bert_tiny_test"), EncoderBackbone)
    model = zoo.from_preset("transformer_tiny", dropout=0.2)
    assert isinstance(model, Seq2SeqLM) and model.dropout == 0.2


def test_a_preset_follows_the_dtype_policy():
    keras.config.set_dtype_policy("mixed_bfloat16")
    model = zoo.from_preset("gpt_tiny")
    assert model.dtype_policy.name == "mixed_bfloat16"
    logits = model(np.array([[1, 2, 3]]))
    assert logits.dtype == "float32"


def test_unknown_preset_lists_the_available_ones():
    with pytest.raises(ValueError, match="gpt_micro"):
        zoo.from_preset("gpt_huge")

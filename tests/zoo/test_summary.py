"""`summary()` works on every model family and on every preset of the zoo.

It once raised a TypeError on `from_preset("bert_tiny")` (a layer whose
`build` and `compute_output_shape` named their argument differently).
"""

import numpy as np
import pytest

from keras_tfm import zoo
from keras_tfm.models import (
    EncoderBackbone,
    EncoderClassifier,
    MaskedLanguageModel,
)
from tests.builders import causal_lm, seq2seq_lm

BUILT_HERE = [n for n in zoo.list_presets() if zoo.preset_weights(n) != "pretrained"]
SIZES = dict(vocabulary_size=30, num_heads=2, hidden_dim=8, intermediate_dim=16)


def summary_text(model):
    lines = []
    model.summary(print_fn=lambda line, **kwargs: lines.append(line))
    return "\n".join(lines)


def backbone(**overrides):
    return EncoderBackbone(num_layers=2, max_sequence_length=8, **SIZES, **overrides)


FAMILIES = {
    "causal_lm": lambda: causal_lm(num_layers=2, max_sequence_length=8, **SIZES),
    "causal_lm_rotary_untied": lambda: causal_lm(
        num_layers=1,
        max_sequence_length=8,
        position_encoding="rotary",
        tie_word_embeddings=False,
        **SIZES,
    ),
    "encoder_backbone": backbone,
    "encoder_backbone_sinusoidal_pre_ln": lambda: backbone(
        position_encoding="sinusoidal", normalize_first=True
    ),
    "encoder_classifier": lambda: EncoderClassifier(backbone(), num_classes=3),
    "masked_language_model": lambda: MaskedLanguageModel(backbone()),
    "seq2seq": lambda: seq2seq_lm(
        num_encoder_layers=1, num_decoder_layers=2, max_sequence_length=8, **SIZES
    ),
    "seq2seq_learned_untied": lambda: seq2seq_lm(
        num_encoder_layers=1,
        num_decoder_layers=1,
        max_sequence_length=8,
        position_encoding="learned",
        tie_word_embeddings=False,
        **SIZES,
    ),
}


@pytest.mark.parametrize("name", FAMILIES)
def test_every_family_has_a_summary_with_its_parameter_count(name):
    model = FAMILIES[name]()
    text = summary_text(model)
    assert f"Total params: {model.count_params():,}" in text
    # Each direct sublayer gets a row with its own name.
    for layer in model.layers:
        assert layer.name in text


def preset_overrides(name):
    """Untrained architecture presets are built one block deep.

    The biggest (transformer_big, 214M parameters; bert_base; gpt_small)
    take 3-14 s each to build in full on a shared 2-core machine; one block
    exercises the same summary code in well under a second. Presets with
    trained weights are built in full, weights loaded.
    """
    if (zoo.preset_dir(name) / "model.weights.h5").is_file():
        return {}
    config = zoo.catalogue._read_spec(zoo.preset_dir(name) / "config.json")["config"]
    if "num_encoder_layers" in config:
        return dict(num_encoder_layers=1, num_decoder_layers=1)
    if "num_layers" in config:
        return dict(num_layers=1)
    return {}


# Presets converted from installed packages: tests/zoo/test_installed_checkpoints.py
@pytest.mark.parametrize("name", BUILT_HERE)
def test_every_preset_has_a_summary(name):
    model = zoo.from_preset(name, **preset_overrides(name))
    text = summary_text(model)
    assert f"Total params: {model.count_params():,}" in text
    assert "Output Shape" in text


def test_bert_tiny_summary_shows_the_position_embedding_shape():
    model = zoo.from_preset("bert_tiny")
    text = summary_text(model)
    row = next(line for line in text.splitlines() if "position_embedding" in line)
    assert f"(None, None, {model.hidden_dim})" in row
    # The model still runs after its summary.
    assert np.asarray(model(np.array([[2, 5, 7, 0]]))).shape == (1, 4, model.hidden_dim)

"""Every float setting of the package refuses NaN and infinity, by name.

`nan <= 0` is False, so a range check alone lets NaN through: a NaN
temperature sampled garbage and an infinite one sampled uniformly.
"""

import math

import keras
import keras_hub
import numpy as np
import pytest

from keras_tfm import cli, data, generation, layers, models, training, validation

NON_FINITE = [math.nan, math.inf, -math.inf]


def lm(**overrides):
    # `from_config` of the flat arguments: what the converters build with.
    return models.CausalLM.from_config(
        {
            "vocabulary_size": 50, "num_layers": 1, "num_heads": 2, "hidden_dim": 16,
            "intermediate_dim": 32, "max_sequence_length": 16, **overrides,
        }
    )  # fmt: skip


def generate(**options):
    return lm().generate([[1, 2]], max_new_tokens=2, **options)


def distiller_compile(**options):
    student = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    training.Distiller(None, student).compile(
        student_loss_fn=keras.losses.SparseCategoricalCrossentropy(), **options
    )


def built_lm():
    model = lm()
    model(np.ones((1, 4), "int32"))
    return model


# name -> a call taking the bad value for that setting
SETTINGS = {
    "temperature": lambda v: generate(sampler="random", temperature=v),
    "top_p": lambda v: generate(sampler="top_p", top_p=v),
    "length_penalty": lambda v: generate(sampler="beam", num_beams=2,
                                         length_penalty=v),
    "dropout": lambda v: lm(dropout=v),
    "layer_norm_epsilon": lambda v: lm(layer_norm_epsilon=v),
    "rotary_max_wavelength": lambda v: lm(position_encoding="rotary",
                                          rotary_max_wavelength=v),
    "max_wavelength": lambda v: layers.RotaryEmbedding(max_wavelength=v),
    "label_smoothing": lambda v: training.TokenCrossEntropy(label_smoothing=v),
    "scale": lambda v: training.TransformerSchedule(hidden_dim=16, scale=v),
    "lora_alpha": lambda v: training.enable_lora(built_lm(), rank=2, lora_alpha=v),
    "alpha": lambda v: distiller_compile(alpha=v),
    "peak_flops": lambda v: training.ThroughputCallback(tokens_per_step=8,
                                                        peak_flops=v),
    "mask_selection_rate": lambda v: models.MaskedLMMasker(
        vocabulary_size=10, mask_token_id=1, mask_selection_length=2,
        mask_selection_rate=v),
    "validation_fraction": lambda v: data.language_model_datasets(
        "abc " * 200, keras_hub.tokenizers.ByteTokenizer(), 8, 2,
        validation_fraction=v),
}  # fmt: skip


@pytest.mark.parametrize("value", NON_FINITE, ids=str)
@pytest.mark.parametrize("name", SETTINGS)
def test_a_non_finite_setting_is_refused_by_name(name, value):
    with pytest.raises(ValueError, match=rf"Received: {name}={value!r}"):
        SETTINGS[name](value)


def test_the_distillation_temperature_refuses_infinity():
    with pytest.raises(ValueError, match="Received: temperature=inf"):
        distiller_compile(temperature=math.inf)


def test_the_beam_sampler_refuses_a_non_finite_temperature():
    with pytest.raises(ValueError, match="Received: temperature=nan"):
        generation.BeamSearchSampler(temperature=math.nan)


@pytest.mark.parametrize("value", NON_FINITE, ids=str)
def test_the_shared_checks(value):
    for check in (validation.check_positive_float, validation.check_finite_float,
                  validation.check_rate):  # fmt: skip
        with pytest.raises(ValueError, match=rf"Received: x={value!r}"):
            check("x", value)
    assert validation.check_finite_float("x", -2) == -2.0
    assert validation.check_positive_float("x", 1e308) == 1e308


@pytest.mark.parametrize("flag", ["--learning-rate", "--peak-flops"])
@pytest.mark.parametrize("text", ["nan", "inf", "-inf"])
def test_cli_float_flags_refuse_non_finite_values(flag, text, capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["train", flag, text])
    assert info.value.code == 2  # argparse: a malformed flag
    assert f"{flag[2:]}" in capsys.readouterr().err


def test_cli_dropout_nan_names_the_setting():
    with pytest.raises(SystemExit, match="Received: --dropout nan"):
        cli.main(["train", "--dropout", "nan", "--epochs", "1"])


@pytest.mark.parametrize("flag,name", [("--temperature", "temperature"),
                                       ("--top-p", "top_p")])  # fmt: skip
def test_cli_generate_refuses_a_nan_sampling_setting(flag, name, tmp_path):
    model = lm(vocabulary_size=256, tokenizer=keras_hub.tokenizers.ByteTokenizer())
    model(np.ones((1, 2), "int32"))
    model.save(tmp_path / "lm.keras")
    with pytest.raises(SystemExit, match=f"Received: {flag} nan"):
        cli.main(["generate", str(tmp_path / "lm.keras"), "--prompt", "a",
                  "--max-new-tokens", "2", "--sampler", "top_p",
                  flag, "nan"])  # fmt: skip

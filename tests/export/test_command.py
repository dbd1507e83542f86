"""`keras-tfm export`'s flags reach `export_saved_model` (no model exported)."""

import doctest

import pytest

from keras_tfm import cli
from keras_tfm.export import command


def test_docstring_example():
    result = doctest.testmod(command)
    assert result.attempted > 0 and result.failed == 0


def test_the_defaults_are_export_saved_models():
    import inspect

    from keras_tfm.export import export_saved_model

    args = cli.build_parser().parse_args(["export", "kjv_gpt", "out"])
    defaults = {
        name: p.default
        for name, p in inspect.signature(export_saved_model).parameters.items()
    }
    options = command.saved_model_options(args)
    assert options == {name: defaults[name] for name in options}


@pytest.mark.parametrize("flag", ["--num-beams", "--max-new-tokens"])
def test_a_bad_flag_is_refused_before_the_model_loads(tmp_path, flag):
    # "no_such_preset" would fail to load: the flag's error comes first.
    with pytest.raises(SystemExit, match=rf"{flag} must be at least 1.*Received"):
        cli.main(["export", "no_such_preset", str(tmp_path / "out"), flag, "0"])
    assert not (tmp_path / "out").exists()


def test_a_causal_lm_exports_its_int8_decoding_step(tmp_path, capsys):
    # gpt_tiny keeps no step template: the converter's step, its matrices
    # int8 as the chat's (the key/value projections float32).
    import numpy as np

    from keras_tfm.lite.litert_decoder import LiteRTDecoder

    out = tmp_path / "out"
    argv = ["export", "gpt_tiny", str(out), "--format", "litert"]
    with pytest.raises(SystemExit, match="takes --weights float32 or int8"):
        cli.main([*argv, "--weights", "bfloat16"])
    cli.main([*argv, "--weights", "int8"])
    said = capsys.readouterr().out
    assert "decoder.tflite" in said and "int8; signatures: prefill, decode" in said
    decoder = LiteRTDecoder(out / "decoder.tflite", kernels="builtin")
    logits = decoder.prefill([1, 2, 3], 0)
    assert logits.shape == (decoder.vocabulary_size,) and np.isfinite(logits).all()
    with pytest.raises(SystemExit, match="exists; pass --overwrite"):
        cli.main([*argv, "--weights", "int8"])

"""Every example parses its arguments before it imports TensorFlow, so that
`python examples/X.py --help` (or a bad flag) answers at once and quietly."""

import builtins
import runpy
import sys
from pathlib import Path

import pytest

EXAMPLES = sorted((Path(__file__).parents[2] / "examples").glob("*.py"))
HEAVY = ("tensorflow", "keras", "keras_hub", "keras_tfm", "numpy", "matplotlib")


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda path: path.name)
def test_help_is_answered_before_anything_heavy_is_imported(
    path, monkeypatch, capsys
):
    imported = []
    real_import = builtins.__import__

    def recording_import(name, *args, **kwargs):
        imported.append(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", recording_import)
    monkeypatch.setattr(sys, "argv", [str(path), "--help"])
    with pytest.raises(SystemExit) as exit_:
        runpy.run_path(str(path), run_name="__main__")
    monkeypatch.undo()
    assert exit_.value.code == 0
    assert "usage:" in capsys.readouterr().out
    assert "argparse" in imported  # the recording works
    assert not [name for name in imported if name.split(".")[0] in HEAVY]


def test_the_examples_are_all_here():
    assert len(EXAMPLES) >= 8

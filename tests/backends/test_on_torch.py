"""Presets on PyTorch give TensorFlow's answers (where PyTorch is installed).

CI does not install PyTorch (a 200 MB wheel and its import for one lane):
this file skips there, and runs wherever `torch` is importable
(docs/backends.md). torch_checks.py runs in a subprocess with
`KERAS_BACKEND=torch` and checks that keras-tfm imported no TensorFlow; this
process computes the same answers on TensorFlow.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import keras
import pytest

from tests.backends import string_cases as cases

pytest.importorskip("torch", reason="PyTorch is not installed (pip install torch)")
pytestmark = pytest.mark.skipif(
    keras.backend.backend() != "tensorflow", reason="compares PyTorch with TensorFlow"
)
HERE = Path(__file__).parent


def test_presets_answer_on_torch_as_on_tensorflow(tmp_path):
    from keras_tfm import zoo

    path = tmp_path / "torch.json"
    # One thread: PyTorch's OpenMP threads spin against pytest's other worker.
    env = dict(os.environ, KERAS_BACKEND="torch", OMP_NUM_THREADS="1")
    result = subprocess.run(
        [sys.executable, str(HERE / "torch_checks.py"), str(path)], env=env,
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), (
        result.stdout[-2000:] + result.stderr[-4000:]
    )
    got = json.loads(path.read_text("utf-8"))
    models = {name: zoo.from_preset(name) for name, _, _ in cases.GENERATED}
    assert got["generated"] == cases.generated(models)
    text, label = cases.CLASSIFIED
    classifier = zoo.from_preset("fortunes_classifier")
    assert got["class"] == classifier.classify(text) == label

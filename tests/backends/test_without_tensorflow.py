"""keras-tfm on JAX with TensorFlow blocked: import, layers, fit, saving.

Each check runs in a subprocess with `KERAS_BACKEND=jax` whose first import
makes every import of TensorFlow fail (block_tensorflow.py), as on a GPU
machine that has JAX and no TensorFlow.
"""

import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent


def run_jax(*args):
    env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu")
    result = subprocess.run(
        [sys.executable, *map(str, args)], env=env, capture_output=True,
        text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), (
        result.stdout[-2000:] + result.stderr[-4000:]
    )


def test_import_layers_fit_and_saving_without_tensorflow(tmp_path):
    run_jax(HERE / "jax_checks.py", "save", tmp_path)
    run_jax(HERE / "jax_checks.py", "load", tmp_path)  # a fresh process

"""benchmarks/gpu_train.py --tiny: both GPT-2 rows train, on JAX and on
TensorFlow, on the CPU."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parents[2] / "benchmarks" / "gpu_train.py"


@pytest.mark.parametrize(
    "backend",
    # TensorFlow's step is read in tests/models/test_tensorflow_train_step_hlo.py;
    # its benchmark run costs 17 s more.
    ["jax", pytest.param("tensorflow", marks=pytest.mark.slow)],
)
def test_tiny_run_trains_both_models_with_the_same_parameter_count(backend):
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env.pop("KERAS_BACKEND", None)  # the flag chooses
    command = [sys.executable, str(SCRIPT), "--tiny", "--layers", "1", "--seq",
               "16", "--steps", "1", "--warmup", "1", "--backend", backend]  # fmt: skip
    result = subprocess.run(
        command, env=env, capture_output=True, text=True, timeout=300
    )
    rows = [json.loads(x) for x in result.stdout.splitlines() if x.startswith("{")]
    assert [r["part"] for r in rows] == ["keras_hub", "keras_tfm"], (
        result.stdout[-2000:] + result.stderr[-3000:]
    )
    for row in rows:
        assert "error" not in row, row["error"]
        assert row["backend"] == backend
        assert row["tokens_per_s"] > 0
        # Random labels over a 512-token vocabulary from a fresh model: ln(512).
        assert abs(row["final_loss"] - math.log(512)) < 0.5, row
    # The same GPT-2 shape: keras-hub's and keras-tfm's parameters agree.
    assert rows[0]["params"] == rows[1]["params"]
    assert "| keras_tfm | 16 x 4 |" in result.stdout

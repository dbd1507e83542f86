"""benchmarks/gpu_train.py --tiny: both GPT-2 rows train, on JAX, on the CPU."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).parents[2] / "benchmarks" / "gpu_train.py"


def test_tiny_run_trains_both_models_with_the_same_parameter_count():
    env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu")
    command = [sys.executable, str(SCRIPT), "--tiny", "--layers", "1", "--seq",
               "16", "--steps", "1", "--warmup", "1"]  # fmt: skip
    result = subprocess.run(
        command, env=env, capture_output=True, text=True, timeout=300
    )
    rows = [json.loads(x) for x in result.stdout.splitlines() if x.startswith("{")]
    assert [r["part"] for r in rows] == ["keras_hub", "keras_tfm"], (
        result.stdout[-2000:] + result.stderr[-3000:]
    )
    for row in rows:
        assert "error" not in row, row["error"]
        assert row["tokens_per_s"] > 0
        # Random labels over a 512-token vocabulary from a fresh model: ln(512).
        assert abs(row["final_loss"] - math.log(512)) < 0.5, row
    # The same GPT-2 shape: keras-hub's and keras-tfm's parameters agree.
    assert rows[0]["params"] == rows[1]["params"]
    assert "| keras_tfm | 16 x 4 |" in result.stdout

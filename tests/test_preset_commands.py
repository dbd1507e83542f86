"""Every command line `keras-tfm presets` prints runs as printed (with small
limits: tests/preset_commands.py), all in one process."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_command_that_presets_prints_runs(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "tests.preset_commands", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=1200,
        env={**os.environ, "KERAS_TFM_CACHE_DIR": "off"},
    )  # fmt: skip
    lines = result.stdout.splitlines()
    failed = [line for line in lines if line.startswith("failed")]
    assert not failed and result.returncode == 0, "\n".join(failed) or result.stderr
    ran = [line for line in lines if line.startswith("ok keras-tfm")]
    # Each kind of command ran: a training, generation, translation, chat, classify.
    for words in ("train --preset gpt_tiny", "generate kjv_gpt", "translator_de_en",
                  "translator_es_en", "chat", "classify"):  # fmt: skip
        assert any(words in line for line in ran), (words, lines)

"""Keras imported after `import keras_tfm` starts TensorFlow quietly, unless
the user asks for its logs (`TF_CPP_MIN_LOG_LEVEL`), whose value is never
overridden."""

import contextlib
import os
import subprocess
import sys

import pytest

from keras_tfm._tensorflow_logs import quiet_tensorflow_import
from tests.test_cli import TF_LOG_LINES

# Keras imports TensorFlow (the backend these tests run on); its first
# operation lists the devices, where TensorFlow probes CUDA.
SHOW_LEVEL = (
    "import os, keras_tfm, keras, sys; assert 'tensorflow' in sys.modules; "
    "keras.ops.ones(1); print(os.environ['TF_CPP_MIN_LOG_LEVEL'])"
)


def run_python(code, **env):
    """`code` in a fresh interpreter without the TF_CPP settings of this one."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TF_CPP")}
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**clean, **env},
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    return result


@pytest.mark.slow  # a fresh process
def test_import_prints_no_tensorflow_lines():
    if os.path.exists("/proc/driver/nvidia"):
        pytest.skip("with NVIDIA's driver a failed CUDA probe is worth its line")
    result = run_python(SHOW_LEVEL)
    assert not TF_LOG_LINES.search(result.stderr), result.stderr
    assert result.stdout.strip() == "2"  # the default set, errors still shown


@pytest.mark.slow  # fresh processes
def test_the_users_level_is_kept_and_zero_shows_tensorflows_lines():
    # TensorFlow on a CPU writes start-up lines (oneDNN, CUDA drivers, CPU
    # features) that the pattern finds: the user's 0 lets them through.
    result = run_python(SHOW_LEVEL, TF_CPP_MIN_LOG_LEVEL="0")
    assert result.stdout.strip() == "0"
    assert TF_LOG_LINES.search(result.stderr)


LINES = (
    b"WARNING: All log messages before absl::InitializeLog() is called are "
    b"written to STDERR\n",
    b"I0000 00:00:1795424492.382020   10272 port.cc:153] oneDNN custom\n",
    b"W0000 00:00:1795424497.971234    4930 assert_op.cc:38] Ignoring Assert\n",
    b"E1123 09:00:01.000001 4930 cuda_platform.cc:52] failed call to cuInit\n",
    b"F1123 09:00:01.000001 4930 main.cc:1] fatal\n",
    b"a line of the user's\n",
)


@pytest.mark.parametrize(
    "level, kept",
    [
        (1, ["W0000", "E1123", "F1123", "a"]),
        (2, ["E1123", "F1123", "a"]),
        (3, ["F1123", "a"]),  # FATAL and the user's lines always pass
    ],
)
def test_the_filter_drops_absl_lines_below_the_level(level, kept):
    code = (
        "import os, keras_tfm._tensorflow_logs as logs\n"
        f"with logs.drop_absl_lines_from_stderr({level}):\n"
        f"    for line in {LINES!r}:\n"
        "        os.write(2, line)\n"
    )
    stderr = run_python(code).stderr
    starts = [line.split()[0] for line in stderr.splitlines()]
    assert starts == kept, stderr


def test_nothing_is_done_once_tensorflow_is_imported(monkeypatch):
    import tensorflow  # noqa: F401 (the state under test)

    monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL", raising=False)
    context = quiet_tensorflow_import()
    assert isinstance(context, contextlib.nullcontext)
    assert "TF_CPP_MIN_LOG_LEVEL" not in os.environ

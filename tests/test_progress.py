"""The `keras_tfm` logger's lines before long waits (keras_tfm.progress)."""

import logging
import os
import subprocess
import sys
import time

import numpy as np
import pytest
from keras import ops

from keras_tfm import progress
from keras_tfm.generation import backend


@pytest.fixture
def lines():
    """The messages the `keras_tfm` logger emits during a test."""
    seen = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())
    progress.logger.addHandler(handler)
    yield seen
    progress.logger.removeHandler(handler)


def test_a_slow_block_is_announced_and_a_quick_one_is_not(lines):
    with progress.slow_call_notice("loading the weights", seconds=0.05):
        time.sleep(0.5)
    with progress.slow_call_notice("reading the config", seconds=30.0):
        pass
    assert lines == ["loading the weights"]


def test_a_first_compile_at_each_shape_is_announced_once(lines, monkeypatch):
    monkeypatch.setattr(progress, "NOTICE_SECONDS", 0.05)

    def add_one(x):
        time.sleep(0.5)  # Python runs while the function is traced: a slow compile
        return ops.add(x, 1.0)

    compiled = backend.compile_loop(add_one)
    small, large = np.zeros((2, 3), "float32"), np.zeros((4, 5), "float32")
    np.testing.assert_allclose(ops.convert_to_numpy(compiled(small)), small + 1)
    compiled(small)  # compiled: nothing to say
    compiled(large)
    assert lines == [
        "compiling `add_one` for inputs of shape [2, 3] (once per input shape)",
        "compiling `add_one` for inputs of shape [4, 5] (once per input shape)",
    ]


def _logged(verbosity):
    """stderr of a fresh process that logs one INFO line."""
    env = {k: v for k, v in os.environ.items() if k != "KERAS_TFM_VERBOSITY"}
    if verbosity is not None:
        env["KERAS_TFM_VERBOSITY"] = verbosity
    code = "from keras_tfm.progress import logger; logger.info('compiling x')"
    run = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr
    return run.stderr


def test_lines_reach_stderr_by_default_and_the_environment_quiets_them():
    assert _logged(None) == "keras-tfm: compiling x\n"
    assert _logged("warning") == ""
    assert _logged("no-such-level") == "keras-tfm: compiling x\n"

"""Runs the training scripts of tests/distribute in subprocesses, with bounded
timeouts."""

import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

WORKER = Path(__file__).with_name("worker.py")
TIMEOUT = 600  # seconds; generous for a shared 2-core machine, but never a hang
FAMILIES = ("causal", "seq2seq", "classifier")
MODES = ("single", "mirrored")  # conftest's local_runs, in one process


def start_worker(mode, out, tf_config=None):
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    env.pop("TF_CONFIG", None)
    if tf_config is not None:
        env["TF_CONFIG"] = tf_config
    return subprocess.Popen(
        [sys.executable, str(WORKER), mode, str(out)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def finish(processes):
    """Waits for all, killing every one of them if any overruns or fails."""
    try:
        for process in processes:
            output, _ = process.communicate(timeout=TIMEOUT)
            if process.returncode != 0:
                pytest.fail(f"worker failed ({process.returncode}):\n{output[-4000:]}")
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
            process.communicate()  # reaps it and closes its pipe


def free_ports(count):
    """`count` TCP ports on 127.0.0.1 that were free a moment ago."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


@pytest.fixture(scope="session")
def local_runs(tmp_path_factory):
    """`(single, mirrored)`: the reference training on one device and the same
    under MirroredStrategy, one after the other in one process (one
    TensorFlow start for both), run once per session."""
    out = tmp_path_factory.mktemp("local") / "run.npz"
    finish([start_worker("single,mirrored", out)])
    return tuple(dict(np.load(out.with_suffix(f".{m}.npz"))) for m in MODES)


@pytest.fixture(scope="session")
def single_device_run(local_runs):
    """The reference: the same training on one device."""
    return local_runs[0]


def assert_same_training(reference, result):
    for family in FAMILIES:
        names = [k for k in reference if k.startswith(f"{family}/weight_")]
        assert names
        for name in names:
            np.testing.assert_allclose(
                result[name], reference[name], atol=2e-5, err_msg=name
            )
        # Each example went through exactly one training step per epoch,
        # counted over all replicas (and workers).
        np.testing.assert_array_equal(result[f"{family}/seen"], 1.0)

"""keras.distribution's DataParallel on JAX over two CPU processes (127.0.0.1,
two devices each) trains a CausalLM like one process on the global batch."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from keras_tfm.distribute import data_parallel
from keras_tfm.distribute.jax_data_parallel import _share
from tests.distribute.conftest import finish, free_ports

# Beside the tf.distribute tests, which also start processes.
pytestmark = pytest.mark.xdist_group("distribute")
WORKER = Path(__file__).with_name("jax_worker.py")


def start_jax_worker(out, *process):
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("KERAS_DISTRIBUTION_")
    }
    env.update(KERAS_BACKEND="jax", JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="2")
    if process:  # two devices in each process: 4 replicas over 2 processes
        flags = env.get("XLA_FLAGS", "")
        env["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count=2"
    return subprocess.Popen(
        [sys.executable, str(WORKER), str(out), *map(str, process)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """One process on whole global batches, and two processes on halves.

    Process 0 runs the one-process training too, after its share (on its
    first device, without a distribution): one JAX start fewer."""
    pytest.importorskip("jax")
    folder = tmp_path_factory.mktemp("jax_data_parallel")
    coordinator = f"127.0.0.1:{free_ports(1)[0]}"
    outs = [folder / f"{name}.npz" for name in ("single", "process-0", "process-1")]
    finish(
        [
            start_jax_worker(outs[1], 0, 2, coordinator, outs[0]),
            start_jax_worker(outs[2], 1, 2, coordinator),
        ]
    )
    return [dict(np.load(out)) for out in outs]


def weights(run, part):
    return [run[f"{part}/{i}"] for i in range(sum(k.startswith(part) for k in run))]


@pytest.mark.slow
def test_two_processes_train_like_one_process(runs):
    single, first, _ = runs
    assert int(single["replicas"]) == 1 and int(first["replicas"]) == 4
    assert int(single["local_rows"]) == 32 and int(first["local_rows"]) == 16
    # The same seed gives the same start (else nothing below would mean much).
    for a, b in zip(weights(single, "initial"), weights(first, "initial"), strict=True):
        np.testing.assert_array_equal(a, b)
    moved = max(
        np.abs(a - b).max()
        for a, b in zip(
            weights(single, "final"), weights(single, "initial"), strict=True
        )
    )
    assert moved > 1e-2  # four Adam steps move the weights far beyond atol
    # Averaged gradients of the global batch (padded labels and all: the
    # token mean is over the whole batch) give one process's weights.
    finals = zip(weights(single, "final"), weights(first, "final"), strict=True)
    for i, (a, b) in enumerate(finals):
        np.testing.assert_allclose(b, a, atol=2e-5, err_msg=f"weight {i}")
    np.testing.assert_allclose(first["loss"], single["loss"], rtol=1e-5)


@pytest.mark.slow
def test_both_processes_end_with_identical_weights(runs):
    _, first, second = runs
    # Both apply the same all-reduced gradient: bit for bit the same.
    for a, b in zip(weights(first, "final"), weights(second, "final"), strict=True):
        np.testing.assert_array_equal(a, b)


def test_data_parallel_refuses_other_backends():
    import keras

    if keras.backend.backend() == "jax":
        pytest.skip("the JAX backend is the one it accepts")
    with pytest.raises(ValueError, match="runs on the JAX backend.*Received: backend"):
        data_parallel()


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"num_processes": 0}, "positive int.*Received: 0"),
        ({"num_processes": 2, "process_id": 0}, "coordinator_address.*Received"),
        (
            {"coordinator_address": "127.0.0.1:1", "num_processes": 2},
            r"process_id. must be an int in \[0, 2\).*Received: process_id=None",
        ),
        (
            {"coordinator_address": "127.0.0.1:1", "num_processes": 2, "process_id": 2},
            "Received: process_id=2",
        ),
    ],
)
def test_data_parallel_refuses_inconsistent_processes(monkeypatch, kwargs, message):
    import keras

    # The checks come before anything reaches JAX, so they run on any backend.
    monkeypatch.setattr(keras.backend, "backend", lambda: "jax")
    for name in ("JOB_ADDRESSES", "NUM_PROCESSES", "PROCESS_ID"):
        monkeypatch.delenv(f"KERAS_DISTRIBUTION_{name}", raising=False)
    with pytest.raises(ValueError, match=message):
        data_parallel(**kwargs)


def test_process_share_keeps_each_process_rows_of_every_global_batch():
    rows = np.arange(8)
    x = {"ids": np.stack([rows, -rows], axis=1), "mask": rows % 2}
    # Global batches [0..3] and [4..7]; of each, process 1 of 2 keeps the
    # second half.
    share = _share((x, rows), global_batch_size=4, count=2, index=1)
    np.testing.assert_array_equal(share[1], [2, 3, 6, 7])
    np.testing.assert_array_equal(share[0]["ids"], [[2, -2], [3, -3], [6, -6], [7, -7]])
    np.testing.assert_array_equal(share[0]["mask"], [0, 1, 0, 1])
    first = _share(rows, global_batch_size=4, count=2, index=0)
    np.testing.assert_array_equal(np.sort(np.concatenate([first, share[1]])), rows)


@pytest.mark.parametrize(
    "data, global_batch_size, message",
    [
        ((np.zeros(8), np.zeros(6)), 4, "same number of rows"),
        (np.zeros(8), 3, "multiple of the 2 processes"),
        (np.zeros(10), 4, "whole number of global batches.*10 rows"),
    ],
)
def test_process_share_refuses_uneven_splits(data, global_batch_size, message):
    with pytest.raises(ValueError, match=message):
        _share(data, global_batch_size, count=2, index=0)

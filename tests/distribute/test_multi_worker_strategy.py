"""MultiWorkerMirroredStrategy over two processes on 127.0.0.1 (TF_CONFIG)."""

import json

import numpy as np
import pytest

from tests.distribute.conftest import (
    assert_same_training,
    finish,
    free_ports,
    start_worker,
)

# One worker runs both files, so the single-device reference runs once.
pytestmark = pytest.mark.xdist_group("distribute")


@pytest.mark.slow
def test_two_workers_equal_single_device(single_device_run, tmp_path):
    workers = [f"127.0.0.1:{port}" for port in free_ports(2)]
    out = tmp_path / "multi.npz"
    processes = [
        start_worker(
            "multi",
            out,
            json.dumps(
                {"cluster": {"worker": workers}, "task": {"type": "worker", "index": i}}
            ),
        )
        for i in range(2)
    ]
    finish(processes)
    chief = dict(np.load(out))
    other = dict(np.load(tmp_path / "multi.worker-1.npz"))
    assert int(chief["replicas"]) == 2
    assert_same_training(single_device_run, chief)
    for name in chief:  # both workers hold the same model
        np.testing.assert_allclose(other[name], chief[name], atol=1e-6)

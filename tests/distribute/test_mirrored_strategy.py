"""MirroredStrategy over two logical CPU devices trains like one device."""

import numpy as np
import pytest

from tests.distribute.conftest import assert_same_training, finish, start_worker

# One worker runs both files, so the single-device reference runs once.
pytestmark = pytest.mark.xdist_group("distribute")


@pytest.mark.slow
def test_mirrored_equals_single_device(single_device_run, tmp_path):
    out = tmp_path / "mirrored.npz"
    finish([start_worker("mirrored", out)])
    result = dict(np.load(out))
    assert int(result["replicas"]) == 2
    assert_same_training(single_device_run, result)

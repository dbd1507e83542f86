"""MirroredStrategy over two logical CPU devices trains like one device."""

import pytest

from tests.distribute.conftest import assert_same_training

# One worker runs both files, so the single-device reference runs once.
pytestmark = pytest.mark.xdist_group("distribute")


@pytest.mark.slow
def test_mirrored_equals_single_device(local_runs):
    # Trained in the reference's process after it (conftest's local_runs).
    single_device_run, result = local_runs
    assert int(result["replicas"]) == 2
    assert_same_training(single_device_run, result)

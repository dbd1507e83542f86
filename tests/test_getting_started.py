"""docs/getting-started.md runs as written and gives the answers it shows."""

from pathlib import Path

import numpy as np
import pytest

from tests.markdown_blocks import check_promises, python_blocks

PAGE = Path(__file__).resolve().parents[1] / "docs" / "getting-started.md"
BLOCKS = python_blocks(PAGE)


@pytest.mark.slow
def test_the_blocks_run_in_order_and_keep_their_promises():
    assert len(BLOCKS) == 4  # classify, generate, fine-tune, save and load
    namespace = {}
    promised = 0
    for index, block in enumerate(BLOCKS):
        exec(compile(block, f"getting-started.md block {index}", "exec"), namespace)
        promised += check_promises(block, namespace)
    assert promised == 4  # classify, translate, classify once reloaded, as a preset
    prompt = "And the LORD said unto Moses"
    assert namespace["sample"].startswith(prompt)
    assert len(namespace["sample"]) > len(prompt)
    classifier = namespace["classifier"]
    assert np.isfinite(namespace["history"].history["loss"]).all()
    # What was saved is what was fine-tuned.
    ids = np.array([[5, 9, 3, 0]], "int32")
    np.testing.assert_allclose(
        np.asarray(namespace["reloaded"](ids)), np.asarray(classifier(ids)), atol=1e-6
    )

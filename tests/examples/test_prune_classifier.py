import json
from pathlib import Path

import keras
import numpy as np
import pytest

from keras_tfm.models import EncoderBackbone, EncoderClassifier
from tests.conftest import requires_debian_package
from tests.examples import load_example_module

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "prune_classifier.py"


def load_example():
    return load_example_module("prune_classifier")


def test_prune_to_reaches_the_counts_asked_for_across_steps():
    example = load_example()
    keras.utils.set_random_seed(0)
    backbone = EncoderBackbone(vocabulary_size=20, num_layers=2, num_heads=4,
                               hidden_dim=8, intermediate_dim=10,
                               max_sequence_length=6, num_segments=0)  # fmt: skip
    model = EncoderClassifier(backbone, 3, pooling="mean")
    assert example.shape_of(model) == (8, 20)
    for heads, units in ((6, 15), (4, 10), (2, 5)):
        model = example.prune_to(model, heads, units, None, "magnitude")
        assert example.shape_of(model) == (heads, units)
        assert min(model.backbone.num_heads_per_layer) >= 1
    assert model(np.array([[2, 5, 7, 0]])).shape == (1, 3)


def test_fractions_on_the_way_step_between_the_reported_fractions():
    example = load_example()
    path = example.fractions_on_the_way([0.25, 0.5, 0.75], 0.125)
    np.testing.assert_allclose(path, [0.125, 0.25, 0.375, 0.5, 0.625, 0.75])
    # A step that does not divide a gap: equal steps no larger than it.
    np.testing.assert_allclose(example.fractions_on_the_way([0.5], 0.2),
                               [1 / 6, 2 / 6, 0.5])  # fmt: skip
    assert example.fractions_on_the_way([0.5], 0.5) == [0.5]
    with pytest.raises(ValueError, match="Received: step=0"):
        example.fractions_on_the_way([0.5], 0)


@requires_debian_package("fortunes")
@pytest.mark.slow
def test_quick_run_prunes_the_zoo_classifier_and_prints_the_table(tmp_path, capsys):
    example = load_example()
    flags = ["--learning-rate", "2e-4", "--fractions", "0.5"]
    summary = example.main(["--quick", "--output", str(tmp_path), *flags])
    assert summary["config"]["learning_rate"] == 2e-4
    assert summary["config"]["fractions"] == [0.5]
    printed = capsys.readouterr().out
    assert "pruned 50%" in printed and "int8" in printed and "speed-up" in printed
    rows = summary["results"]
    unpruned, pruned = rows["unpruned (zoo)"], rows["pruned 50%"]
    assert (unpruned["heads"], unpruned["units"]) == (8, 512)
    assert (pruned["heads"], pruned["units"]) == (4, 256)
    assert pruned["parameters"] < unpruned["parameters"]
    assert pruned["bytes"] < unpruned["bytes"]
    assert all(row["latency_32_ms"] > 0 for row in rows.values())
    written = json.loads((tmp_path / "results.json").read_text())
    assert written["results"].keys() == rows.keys()

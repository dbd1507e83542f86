import json
from pathlib import Path

import numpy as np
import pytest

from tests.examples import load_example_module

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "vit_digits.py"


def load_example():
    return load_example_module("vit_digits")


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_the_attention_paid_to_the_patches_is_read_off_the_last_layer(pooling):
    import keras_tfm

    example = load_example()
    model = keras_tfm.models.VisionTransformer(
        image_shape=(8, 8, 1), patch_size=2, num_layers=1, num_heads=2,
        hidden_dim=8, intermediate_dim=8, num_classes=10, pooling=pooling)  # fmt: skip
    images = np.random.default_rng(0).uniform(size=(3, 8, 8, 1)).astype("float32")
    attention = example.patch_attention(model, images)
    assert attention.shape == (3, 4, 4)
    _, scores = model(images, return_attention_scores=True)
    last = np.asarray(scores[-1], np.float64).mean(1)  # (3, 17, 17)
    # Every reader's row is a distribution; what the patches get is the rest
    # after the class token's column.
    readers = slice(0, 1) if pooling == "cls" else slice(1, 17)
    to_class_token = last[:, readers, 0].mean(1)
    np.testing.assert_allclose(attention.sum((1, 2)) + to_class_token, 1.0,
                               atol=1e-5)  # fmt: skip
    # Patch (row 1, column 2) is token 1 + 1 * 4 + 2.
    np.testing.assert_allclose(attention[:, 1, 2], last[:, readers, 7].mean(1),
                               atol=1e-6)  # fmt: skip


@pytest.mark.slow
def test_quick_run_prints_the_vit_beside_its_baselines(tmp_path, capsys):
    example = load_example()
    summary = example.main(["--quick", "--output", str(tmp_path)])
    printed = capsys.readouterr().out
    for name in ("ViT (keras_tfm)", "small CNN", "logistic regression (pixels)"):
        assert name in printed and 0 <= summary["results"][name]["accuracy"] <= 1
    # Logistic regression on the pixels is a real baseline even in --quick.
    assert summary["results"]["logistic regression (pixels)"]["accuracy"] > 0.85
    assert (tmp_path / "attention.png").stat().st_size > 1000
    written = json.loads((tmp_path / "results.json").read_text())
    assert written["results"].keys() == summary["results"].keys()

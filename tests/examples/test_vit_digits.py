import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "vit_digits.py"


def load_example():
    spec = importlib.util.spec_from_file_location("vit_digits", EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    return example


def test_the_class_tokens_attention_is_a_distribution_over_the_patches():
    import keras_tfm

    example = load_example()
    model = keras_tfm.models.VisionTransformer(
        image_shape=(8, 8, 1), patch_size=2, num_layers=1, num_heads=2,
        hidden_dim=8, intermediate_dim=8, num_classes=10)  # fmt: skip
    images = np.random.default_rng(0).uniform(size=(3, 8, 8, 1)).astype("float32")
    attention = example.class_token_attention(model, images)
    assert attention.shape == (3, 4, 4)
    # The class token also attends to itself: the patches hold the rest.
    _, scores = model(images, return_attention_scores=True)
    itself = np.asarray(scores[-1]).mean(1)[:, 0, 0]
    np.testing.assert_allclose(attention.sum((1, 2)) + itself, 1.0, atol=1e-5)


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

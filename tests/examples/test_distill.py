import importlib.util
import json
from pathlib import Path

import keras
import pytest

from keras_tfm.training import Distiller
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


def test_the_sweep_chooses_on_validation_never_on_test():
    spec = importlib.util.spec_from_file_location("distill", EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    results = {
        "a": {"validation_accuracy": 0.40, "accuracy": 0.60},
        "b": {"validation_accuracy": 0.50, "accuracy": 0.30},
        "c": {"validation_accuracy": 0.50, "accuracy": 0.20},
    }
    assert example.best_on_validation(results, ["a", "b", "c"]) == "b"
    assert example.best_on_validation(results, ["c", "b"]) == "c"  # first of a tie
    assert example.best_on_validation(results, ["a"]) == "a"


def test_the_distilled_students_loss_reaches_the_teacher():
    import keras_hub
    import numpy as np

    spec = importlib.util.spec_from_file_location("distill", EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    config = dict(example.CONFIG, max_sequence_length=8)
    vocabulary = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "a", "b", "c"]
    tokenizer = keras_hub.tokenizers.WordPieceTokenizer(vocabulary=vocabulary)
    shape = dict(num_layers=1, num_heads=2, hidden_dim=8, intermediate_dim=16)
    teacher = example.build_student(shape, tokenizer, 3, config)
    student = example.build_student(shape, tokenizer, 3, config)
    ids, labels = np.array([[2, 4, 5, 3, 0, 0, 0, 0], [2, 6, 3, 0, 0, 0, 0, 0]]), [0, 2]
    distiller = Distiller(teacher, student)
    alpha, temperature = config["alpha"], config["temperature"]
    sparse_ce = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    distiller.compile("adam", student_loss_fn=sparse_ce, alpha=alpha,
                      temperature=temperature)  # fmt: skip

    def expected_loss():
        # float64 NumPy: alpha * CE(y, s) + (1 - alpha) T^2 KL(p_t || p_s), p at T.
        def log_softmax(z):
            z = z - z.max(-1, keepdims=True)
            return z - np.log(np.exp(z).sum(-1, keepdims=True))

        s = np.asarray(student(ids, training=False), "float64")
        t = np.asarray(teacher(ids, training=False), "float64")
        ce = -log_softmax(s)[np.arange(2), labels].mean()
        log_pt, log_ps = log_softmax(t / temperature), log_softmax(s / temperature)
        kl = (np.exp(log_pt) * (log_pt - log_ps)).sum(-1).mean()
        return alpha * ce + (1 - alpha) * temperature**2 * kl

    def loss():
        y_pred = distiller(ids, training=False)
        return float(distiller.compute_loss(ids, np.array(labels), y_pred))

    before = loss()
    assert before == pytest.approx(expected_loss(), rel=1e-4)
    # Another teacher, the same student: the loss follows the teacher.
    teacher.set_weights([w * 3.0 for w in teacher.get_weights()])
    assert loss() == pytest.approx(expected_loss(), rel=1e-4)
    assert abs(loss() - before) > 1e-3

import json
from pathlib import Path

import keras
import numpy as np
import pytest

from keras_tfm.data.classification import classification_dataset
from keras_tfm.training import Distiller
from tests.conftest import requires_debian_package
from tests.examples import load_example_module

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "distill.py"


def load_example():
    return load_example_module("distill")


def test_the_sweep_chooses_on_validation_never_on_test():
    example = load_example()
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

    example = load_example()
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


def write_teacher_logits(path, splits, logits_of):
    arrays = {}
    for name in ("train", "validation", "test"):
        labels = np.asarray(splits[name][1], "int32")
        arrays[f"{name}_labels"] = labels
        arrays[f"{name}_logits"] = logits_of(labels)
    np.savez(path, **arrays)


@requires_debian_package("fortunes")
@pytest.mark.slow
def test_quick_run_learns_from_saved_teacher_logits(tmp_path):
    from keras_tfm.datasets.fortunes import fortune_splits

    example = load_example()
    splits = fortune_splits(seed=example.CONFIG["seed"])
    classes = len(splits["class_names"])
    # A teacher that is always right: its scores must come out as 1.0.
    path = tmp_path / "teacher_logits.npz"
    write_teacher_logits(path, splits, lambda y: 4.0 * np.eye(classes)[y])
    summary = example.main(
        ["--quick", "--output", str(tmp_path), "--teacher-logits", str(path)]
    )
    results = summary["results"]
    assert results["teacher"]["accuracy"] == 1.0
    assert results["teacher"]["validation_accuracy"] == 1.0
    assert set(results) == {"teacher", "student (hard labels)", "student (distilled)"}
    # The same student architecture in both runs.
    hard, soft = results["student (hard labels)"], results["student (distilled)"]
    assert hard["parameters"] == soft["parameters"]
    written = json.loads((tmp_path / "results.json").read_text())
    assert written["results"].keys() == results.keys()
    student = keras.models.load_model(tmp_path / "student_distilled.keras")
    assert student.tokenizer is not None

    # Logits saved for other splits are refused, not silently misaligned.
    write_teacher_logits(path, splits, lambda y: np.zeros((len(y), classes)))
    shuffled = dict(np.load(path))
    shuffled["validation_labels"] = shuffled["validation_labels"][::-1]
    np.savez(path, **shuffled)
    with pytest.raises(ValueError, match="for another validation split"):
        example.main(
            ["--quick", "--output", str(tmp_path), "--teacher-logits", str(path)]
        )


def test_teacher_logits_follow_their_texts_through_the_bucketing():
    import keras_hub

    example = load_example()
    vocabulary = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "a", "b", "c"]
    tokenizer = keras_hub.tokenizers.WordPieceTokenizer(vocabulary=vocabulary)
    texts = ["a", "b b b b b", "c c", "a b c a b c a", "b"]
    labels = np.array([0, 1, 2, 0, 1])
    logits = np.arange(5 * 3, dtype="float32").reshape(5, 3)

    def make_dataset(texts, labels):
        return classification_dataset(
            texts, labels, tokenizer, 2, 16, bucket_lengths=[4, 16], shuffle=True
        )

    dataset = example.with_teacher_logits(texts, labels, logits, make_dataset)
    seen = 0
    for ids, (batch_labels, batch_logits) in dataset:
        for row, label, row_logits in zip(
            ids.numpy(), batch_labels, batch_logits, strict=True
        ):
            # The text is recognisable by its token ids; its targets are its own.
            index = next(i for i, text in enumerate(texts)
                         if list(row[row > 3]) == [4 + "abc".index(w)
                                                   for w in text.split()])  # fmt: skip
            assert label == labels[index]
            np.testing.assert_array_equal(row_logits, logits[index])
            seen += 1
    assert seen == len(texts)

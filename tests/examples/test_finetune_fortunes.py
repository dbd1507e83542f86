import json
import re
from pathlib import Path

import numpy as np
import pytest

import keras_tfm
from tests.conftest import requires_debian_package
from tests.examples import load_example_module

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "finetune_fortunes.py"


def load_example():
    return load_example_module("finetune_fortunes")


@requires_debian_package("fortunes")
@pytest.mark.slow
def test_quick_run_compares_scratch_pretrained_lora_and_tfidf(tmp_path, capsys):
    example = load_example()
    summary = example.main(["--quick", "--output", str(tmp_path)])

    out = capsys.readouterr().out
    assert "pretraining gain over scratch" in out
    written = json.loads((tmp_path / "results.json").read_text())
    assert written["results"] == summary["results"]
    rows = summary["results"]
    assert set(rows) == {
        "TF-IDF + logistic regression",
        "from scratch",
        "MLM-pretrained, full fine-tuning",
        "MLM-pretrained, LoRA rank 2",
    }
    lora = rows["MLM-pretrained, LoRA rank 2"]
    assert (
        lora["trainable_parameters"] < rows["from scratch"]["trainable_parameters"] / 4
    )
    # LoRA runs at 10x the rate chosen for full fine-tuning.
    full = rows["MLM-pretrained, full fine-tuning"]
    assert lora["learning_rate"] == pytest.approx(10 * full["learning_rate"])
    for name in ("from scratch", "MLM-pretrained, full fine-tuning"):
        assert 1 <= rows[name]["best_epoch"] <= summary["config"]["finetune_epochs"]
    assert len(summary["pretraining"]["history"]["loss"]) == 1
    # The pretrained masked LM is saved with its tokenizer, for fine-tuning
    # on other labels; without AdamW's state.
    mlm = keras_tfm.saving.load_model(tmp_path / "masked_lm.keras")
    assert isinstance(mlm, keras_tfm.models.MaskedLanguageModel)
    vocabulary = int(re.search(r"vocabulary (\d+)", out)[1])
    assert mlm.tokenizer.vocabulary_size() == vocabulary
    config = {**example.CONFIG, **example.QUICK}
    backbone = mlm.backbone.get_config()
    for name in ("num_layers", "hidden_dim", "intermediate_dim"):
        assert backbone[name] == config[name], name
    assert getattr(mlm, "optimizer", None) is None
    # Every fine-tuning run started from a linear-probe head (LP-FT).
    for name in ("from scratch", "MLM-pretrained, full fine-tuning"):
        assert 0 <= rows[name]["probe_validation_accuracy"] <= 1

    # Fine-tuning only, from the saved masked LM: no pretraining, no new file.
    again = example.main(
        [
            "--quick",
            "--masked-lm",
            str(tmp_path / "masked_lm.keras"),
            "--output",
            str(tmp_path / "again"),
            "--lora-rank",
            "0",
            "--no-probe-head",
            "--finetune-seed",
            "5",
        ]
    )
    assert again["config"]["finetune_seed"] == 5  # CONFIG's is 1
    assert again["config"]["seed"] == summary["config"]["seed"]  # same splits
    assert again["pretraining"]["history"] == {}
    assert not (tmp_path / "again" / "masked_lm.keras").exists()
    rows = again["results"]
    assert set(rows) == {
        "TF-IDF + logistic regression",
        "from scratch",
        "MLM-pretrained, full fine-tuning",
    }
    assert rows["from scratch"]["probe_validation_accuracy"] is None
    assert (
        rows["from scratch"]["trainable_parameters"]
        == summary["results"]["from scratch"]["trainable_parameters"]
    )


@requires_debian_package("fortunes")
def test_pretraining_text_holds_no_validation_or_test_entry():
    example = load_example()
    splits = example.fortune_splits(seed=0)
    config = dict(example.CONFIG, kjv=False)
    texts = example.unlabelled_texts(splits, None, config)
    held_out = set(splits["validation"][0]) | set(splits["test"][0])
    assert not held_out & set(texts)
    # Every training entry is there, and the entries the classes leave out.
    assert set(splits["train"][0]) < set(texts)


def test_passages_join_lines_to_at_least_the_word_count():
    example = load_example()
    text = "a b\nc d e\nf\ng h i j\nk\n"
    assert example.passages(text, 4) == ["a b c d e", "f g h i j", "k"]


def test_lora_trains_only_adapters_and_starts_from_the_same_function():
    example = load_example()
    backbone = keras_tfm.models.EncoderBackbone(
        vocabulary_size=30,
        num_layers=1,
        num_heads=2,
        hidden_dim=8,
        intermediate_dim=16,
        max_sequence_length=8,
        num_segments=0,
    )
    ids = np.array([[2, 5, 6, 3, 0]])
    before = np.asarray(backbone(ids))
    example.enable_lora(backbone, rank=2)
    # LoRA's B starts at zero: the function is unchanged.
    np.testing.assert_allclose(np.asarray(backbone(ids)), before, atol=1e-6)
    names = sorted(w.path for w in backbone.trainable_weights)
    # Every Dense layer of the backbone (query, key_value, attention output,
    # two feed-forward) has adapters A and B and its bias; nothing else trains.
    assert len([n for n in names if "lora_kernel" in n]) == 2 * 5
    assert all("lora_kernel" in n or n.endswith("/bias") for n in names)
    assert len(names) == 3 * 5
    frozen = [w for w in backbone.non_trainable_weights if "embedding" in w.path]
    assert frozen
    classifier = keras_tfm.models.EncoderClassifier(backbone, num_classes=2)
    classifier.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
    embedding = np.asarray(backbone.token_embedding.weights[0]).copy()
    classifier.fit(ids, np.array([1]), epochs=1, verbose=0)
    np.testing.assert_array_equal(
        np.asarray(backbone.token_embedding.weights[0]), embedding
    )


def test_lora_trainable_parameters_are_rank_times_in_plus_out():
    example = load_example()
    hidden, intermediate, rank = 8, 16, 2
    backbone = keras_tfm.models.EncoderBackbone(
        vocabulary_size=30,
        num_layers=2,
        num_heads=2,
        hidden_dim=hidden,
        intermediate_dim=intermediate,
        max_sequence_length=8,
        num_segments=0,
    )
    example.enable_lora(backbone, rank=rank)
    # Per layer, (in, out) of the adapted kernels: query, key+value (fused),
    # attention output, the two feed-forward projections.
    kernels = [
        (hidden, hidden),
        (hidden, 2 * hidden),
        (hidden, hidden),
        (hidden, intermediate),
        (intermediate, hidden),
    ]
    factors = 2 * sum(rank * (n_in + n_out) for n_in, n_out in kernels)
    biases = 2 * sum(n_out for _, n_out in kernels)
    trainable = sum(int(np.prod(w.shape)) for w in backbone.trainable_weights)
    assert trainable == factors + biases

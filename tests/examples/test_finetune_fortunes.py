import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

import keras_tfm
from tests.conftest import requires_debian_package

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "finetune_fortunes.py"


def load_example():
    spec = importlib.util.spec_from_file_location("finetune_fortunes", EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    return example


@requires_debian_package("fortunes")
@pytest.mark.slow
def test_quick_run_compares_scratch_pretrained_and_lora(tmp_path, capsys):
    example = load_example()
    summary = example.main(["--quick", "--output", str(tmp_path)])

    assert "fine-tuning" in capsys.readouterr().out
    written = json.loads((tmp_path / "results.json").read_text())
    assert written["results"] == summary["results"]
    rows = summary["results"]
    assert set(rows) == {
        "from scratch",
        "MLM-pretrained, full fine-tuning",
        "MLM-pretrained, LoRA rank 2",
    }
    lora = rows["MLM-pretrained, LoRA rank 2"]["trainable_parameters"]
    assert lora < rows["from scratch"]["trainable_parameters"] / 4
    assert 0.0 <= summary["pretraining"]["masked_token_accuracy"] <= 1.0


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

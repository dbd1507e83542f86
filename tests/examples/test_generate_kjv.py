"""examples/generate_kjv.py: the --quick run, and the shipped preset."""

import bz2
import importlib.util
import math
from pathlib import Path

import keras_hub
import numpy as np
import pytest

from keras_tfm import training, zoo
from keras_tfm.data import language_model_datasets
from keras_tfm.datasets import bible
from tests.conftest import requires_debian_package

ROOT = Path(__file__).parents[2]


def load_example():
    spec = importlib.util.spec_from_file_location(
        "generate_kjv", ROOT / "examples" / "generate_kjv.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def float64_metrics(model, dataset):
    """Mean next-byte cross-entropy and accuracy, in float64 NumPy."""
    losses, hits = [], []
    for inputs, labels in dataset:
        logits = np.asarray(model(inputs), "float64")
        logits -= logits.max(-1, keepdims=True)
        log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
        labels = np.asarray(labels)
        losses.append(-np.take_along_axis(log_probs, labels[..., None], -1)[..., 0])
        hits.append(logits.argmax(-1) == labels)
    return np.concatenate(losses).mean(), np.concatenate(hits).mean()


@requires_debian_package("bible-kjv")
@pytest.mark.slow
def test_quick_run_reports_the_metrics_of_the_model_it_saves(tmp_path, capsys):
    example = load_example()
    results = example.main(["--quick", "--save", str(tmp_path / "kjv")])
    printed = capsys.readouterr().out
    assert "> In the beginning" in printed  # the prompt keeps its case
    # The reported metrics are those of the saved model on the held-out
    # windows, recomputed here from the preset (not the example's evaluate).
    model = zoo.from_preset("kjv", root=tmp_path)
    quick = example.QUICK
    text = bible.load_bible()[: quick["characters"]]
    _, validation = language_model_datasets(
        text, model.tokenizer, quick["sequence_length"], quick["batch_size"],
        validation_fraction=0.05, seed=example.SEED,
    )  # fmt: skip
    loss, accuracy = float64_metrics(model, validation)
    assert results["val_loss_per_byte_as_stored"] == pytest.approx(loss, abs=1e-3)
    # The trained weights, before their float16 rounding for storage.
    assert results["stored_weights"] == "float16"
    assert results["val_loss_per_byte"] == pytest.approx(loss, abs=2e-3)
    assert results["val_byte_accuracy"] == pytest.approx(accuracy, abs=1e-2)
    perplexity = math.exp(results["val_loss_per_byte"])
    assert results["val_perplexity_per_byte"] == pytest.approx(perplexity, 1e-3)
    bits = results["val_loss_per_byte"] / math.log(2)
    assert results["val_bits_per_byte"] == pytest.approx(bits, 1e-3)
    # The bzip2 baseline, recomputed from the model's own validation windows.
    text = bible.load_bible()[:100_000].encode()
    _, validation = language_model_datasets(
        text.decode(), keras_hub.tokenizers.ByteTokenizer(lowercase=False), 64, 32, 0.05
    )
    held_out = b"".join(
        np.concatenate([x[:, :1], y], axis=1).astype(np.uint8).tobytes()
        for x, y in validation.as_numpy_iterator()
    )
    start = text.rindex(held_out)
    assert start > 0.9 * len(text)  # the tail of the text
    extra = len(bz2.compress(text[: start + len(held_out)], 9)) - len(
        bz2.compress(text[:start], 9)
    )
    expected = extra * 8 * math.log(2) / len(held_out)
    assert results["bzip2_nats_per_byte"] == pytest.approx(expected, abs=1e-4)
    assert results["xz_nats_per_byte"] > 0
    table = {
        line[:36].strip(): float(line[36:].split()[0])
        for line in printed.splitlines()
        if line.startswith(("model (CausalLM)", "bzip2 -9", "xz -9e"))
    }
    assert table["bzip2 -9 given the training text"] == pytest.approx(expected, 1e-3)
    assert table["model (CausalLM)"] == pytest.approx(
        results["val_loss_per_byte"], abs=1e-4
    )


def test_shipped_preset_is_small_and_reads_like_the_kjv():
    folder = ROOT / "zoo" / "kjv_gpt"
    assert (folder / "model.weights.h5").stat().st_size <= 10 * 2**20
    assert "val_loss_per_byte" in zoo.preset_card("kjv_gpt")
    model = zoo.from_preset("kjv_gpt")
    # Held-out text (the last 5% of the training text is Revelation):
    # the per-byte loss must be far below the 5.55 nats of uniform bytes.
    # (The earlier 1.3M-parameter preset gave 1.64 nats per byte here.)
    text = b"And I saw a new heaven and a new earth: for the first heaven and "
    text += b"the first earth were passed away; and there was no more sea."
    ids = np.frombuffer(text, np.uint8).astype("int32")[None]
    logits = model(ids[:, :-1])
    loss = training.TokenCrossEntropy()(ids[:, 1:], logits)
    assert float(loss) < 2.0
    sample = model.generate("In the beginning", max_new_tokens=32)
    assert sample.startswith("In the beginning") and len(sample) > 20

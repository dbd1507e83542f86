"""examples/generate_kjv.py: the --quick run, and the shipped preset."""

import bz2
import importlib.util
import math
import shutil
from pathlib import Path

import keras_hub
import numpy as np
import pytest

from keras_tfm import training, zoo
from keras_tfm.data import language_model_datasets
from keras_tfm.datasets.bible import load_bible

ROOT = Path(__file__).parents[2]
needs_bible = pytest.mark.skipif(
    shutil.which("bible") is None, reason="the bible-kjv Debian package is missing"
)


def load_example():
    spec = importlib.util.spec_from_file_location(
        "generate_kjv", ROOT / "examples" / "generate_kjv.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@needs_bible
@pytest.mark.slow
def test_quick_run_reports_per_byte_metrics_and_samples(capsys):
    results = load_example().main(["--quick"])
    loss = results["val_loss_per_byte"]
    assert 0.0 < loss < math.log(256) + 0.5  # learned something, finite
    assert results["val_perplexity_per_byte"] == pytest.approx(math.exp(loss), 1e-3)
    assert results["val_bits_per_byte"] == pytest.approx(loss / math.log(2), 1e-3)
    printed = capsys.readouterr().out
    assert "> In the beginning" in printed  # the prompt keeps its case
    # The bzip2 baseline, recomputed from the model's own validation windows.
    text = load_bible()[:100_000].encode()
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
    assert table["model (CausalLM)"] == pytest.approx(loss, abs=1e-4)


def test_shipped_preset_is_small_and_reads_like_the_kjv():
    folder = ROOT / "zoo" / "kjv_gpt"
    assert (folder / "model.weights.h5").stat().st_size <= 10 * 2**20
    assert "val_loss_per_byte" in zoo.preset_card("kjv_gpt")
    model = zoo.from_preset("kjv_gpt")
    # Held-out text (the last 5% of the training text is Revelation):
    # the per-byte loss must be far below the 5.55 nats of uniform bytes.
    # Measured once with the shipped weights: 1.64 nats per byte.
    text = b"And I saw a new heaven and a new earth: for the first heaven and "
    text += b"the first earth were passed away; and there was no more sea."
    ids = np.frombuffer(text, np.uint8).astype("int32")[None]
    logits = model(ids[:, :-1])
    loss = training.TokenCrossEntropy()(ids[:, 1:], logits)
    assert float(loss) < 2.0
    sample = model.generate("In the beginning", max_new_tokens=32)
    assert sample.startswith("In the beginning") and len(sample) > 20

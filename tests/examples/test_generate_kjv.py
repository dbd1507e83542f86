"""examples/generate_kjv.py: the --quick run, and the shipped preset."""

import bz2
import math
import re
from pathlib import Path

import numpy as np
import pytest

from keras_tfm import zoo
from keras_tfm.datasets import bible
from tests.conftest import requires_debian_package
from tests.examples import load_example_module

ROOT = Path(__file__).parents[2]


def load_example():
    return load_example_module("generate_kjv")


def float64_sums(model, windows, batch_size=32):
    """Summed next-token cross-entropy and hits over `windows`, float64 NumPy."""
    loss, hits = 0.0, 0
    for i in range(0, len(windows), batch_size):
        inputs, labels = (
            windows[i : i + batch_size, :-1],
            windows[i : i + batch_size, 1:],
        )
        logits = np.asarray(model(inputs), "float64")
        logits -= logits.max(-1, keepdims=True)
        log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
        loss -= np.take_along_axis(log_probs, labels[..., None], -1).sum()
        hits += int((logits.argmax(-1) == labels).sum())
    return loss, hits


@requires_debian_package("bible-kjv")
@pytest.mark.slow
def test_quick_run_reports_the_per_byte_metrics_of_the_model_it_saves(tmp_path, capsys):
    example = load_example()
    results = example.main(["--quick", "--save", str(tmp_path / "kjv")])
    printed = capsys.readouterr().out
    assert "> In the beginning" in printed  # the prompt keeps its case
    # The reported metrics are those of the saved model on the held-out
    # text, recomputed here from the preset (not the example's evaluate):
    # the summed token loss over the held-out text's bytes.
    model = zoo.from_preset("kjv", root=tmp_path)
    quick = example.QUICK
    text = bible.load_bible()[: quick["characters"]]
    held_out = text[text.rfind("\n", 0, int(0.95 * len(text))) + 1 :]
    assert held_out and text.endswith(held_out)
    ids = np.asarray(model.tokenizer(held_out), "int32")
    assert model.tokenizer.detokenize(ids) == held_out  # lossless
    length = quick["sequence_length"]
    count = (len(ids) - 1) // length
    windows = ids[np.arange(count)[:, None] * length + np.arange(length + 1)]
    scored_ids = ids[1 : 1 + count * length]
    first = len(model.tokenizer.detokenize(ids[:1]).encode())
    tail = len(model.tokenizer.detokenize(ids[1 + count * length :]).encode())
    scored_bytes = len(held_out.encode()) - first - tail
    loss, hits = float64_sums(model, windows)
    per_byte = loss / scored_bytes
    assert results["val_loss_per_byte_as_stored"] == pytest.approx(per_byte, abs=1e-3)
    # The trained weights, before their float16 rounding for storage.
    assert results["stored_weights"] == "float16"
    assert results["val_loss_per_byte"] == pytest.approx(per_byte, abs=2e-3)
    assert results["val_loss_per_token"] == pytest.approx(
        loss / len(scored_ids), abs=5e-3
    )
    assert results["val_token_accuracy"] == pytest.approx(
        hits / len(scored_ids), abs=1e-2
    )
    assert results["bytes_per_token"] == pytest.approx(
        scored_bytes / len(scored_ids), 1e-4
    )
    perplexity = math.exp(results["val_loss_per_byte"])
    assert results["val_perplexity_per_byte"] == pytest.approx(perplexity, 1e-3)
    bits = results["val_loss_per_byte"] / math.log(2)
    assert results["val_bits_per_byte"] == pytest.approx(bits, 1e-3)
    # The bzip2 baseline, recomputed: the scored bytes coded after the rest.
    data = text.encode()
    start, end = len(data) - len(held_out.encode()) + first, len(data) - tail
    extra = len(bz2.compress(data[:end], 9)) - len(bz2.compress(data[:start], 9))
    expected = extra * 8 * math.log(2) / scored_bytes
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


@pytest.mark.slow  # the shipped preset on held-out data
def test_shipped_preset_is_small_and_reads_like_the_kjv():
    folder = ROOT / "zoo" / "kjv_gpt"
    # 12.2M parameters stored as float16 values (24.4 MB).
    assert (folder / "model.weights.h5").stat().st_size <= 26 * 2**20
    assert "val_loss_per_byte" in zoo.preset_card("kjv_gpt")
    model = zoo.from_preset("kjv_gpt")
    sample = model.generate("In the beginning", max_new_tokens=16)
    assert sample.startswith("In the beginning") and len(sample) > 30


def card_value(name, key):
    row = re.search(rf"^\| {key} \| ([\d.]+) \|$", zoo.preset_card(name), re.M)
    return float(row[1])


@pytest.mark.slow  # the shipped preset on held-out data
@requires_debian_package("bible-kjv")
def test_shipped_preset_codes_held_out_text_in_fewer_nats_than_bzip2():
    """The results page's claim (0.9984 nats/byte against bzip2's 1.2378), checked on
    the shipped weights: bzip2's figure recomputed on the whole held-out
    text, the model's on its first windows, against bzip2 on those bytes."""
    model = zoo.from_preset("kjv_gpt")
    text = bible.load_bible()
    cut = text.rfind("\n", 0, int(0.95 * len(text))) + 1  # the last 5%, at a verse
    train, held_out = text[:cut].encode(), text[cut:]
    ids = np.asarray(model.tokenizer(held_out), "int32")
    length = model.max_sequence_length
    count = (len(ids) - 1) // length
    first = len(model.tokenizer.detokenize(ids[:1]).encode())
    tail = len(model.tokenizer.detokenize(ids[1 + count * length :]).encode())
    data = train + held_out.encode()
    start, end = len(train) + first, len(data) - tail

    def bzip2(begin, stop):  # nats for data[begin:stop], given data[:begin]
        extra = len(bz2.compress(data[:stop], 9)) - len(bz2.compress(data[:begin], 9))
        return extra * 8 * math.log(2)

    whole = bzip2(start, end) / (end - start)
    assert whole == pytest.approx(card_value("kjv_gpt", "bzip2_nats_per_byte"), 1e-3)
    results = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
    row = next(line for line in results.splitlines() if "shipped `kjv_gpt`" in line)
    claim = re.search(
        r"held-out text \*\*([\d.]+)\*\* nats/byte.*"
        r"on the same held-out bytes `bzip2 -9` ([\d.]+)", row
    )
    assert float(claim[2]) == pytest.approx(whole, abs=5e-4)
    # The model on the first 16 windows (overlapping by one token, as in
    # the example: every token but the first is scored).
    windows = ids[np.arange(16)[:, None] * length + np.arange(length + 1)]
    loss, _ = float64_sums(model, windows, batch_size=4)
    stop = start + len(model.tokenizer.detokenize(windows[:, 1:].reshape(-1)).encode())
    per_byte = loss / (stop - start)
    assert per_byte < 0.9 * bzip2(start, stop) / (stop - start)
    assert per_byte == pytest.approx(float(claim[1]), abs=0.1)

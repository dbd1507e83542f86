"""The keras-tfm command, end to end on a small text, and its errors."""

import contextlib
import io
import math
import re

import keras
import numpy as np
import pytest

from keras_tfm import cli, training
from keras_tfm.data import language_model_datasets, load_default_corpus


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cli")
    text = folder / "corpus.txt"
    text.write_text(load_default_corpus()[:20_000], encoding="utf-8")
    model = folder / "tiny.keras"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        cli.main(
            [
                "train", "--data", str(text), "--preset", "gpt_tiny", "--epochs", "1",
                "--batch-size", "8", "--sequence-length", "32", "--output",
                str(model), "--max-new-tokens", "8", "--prompt", "And",
                "--prompt", "Moses",
            ]
        )  # fmt: skip
    return model, text, printed.getvalue()


def test_train_writes_a_model_and_prints_a_sample_per_prompt(trained):
    model, _, printed = trained
    assert model.is_file() and model.stat().st_size > 0
    samples = re.findall(r"^>>> (.*)$", printed, re.MULTILINE)
    assert len(samples) == 2, printed
    # Each continues its prompt by at most --max-new-tokens bytes (byte-level).
    for prompt, sample in zip(["And", "Moses"], samples, strict=True):
        assert sample.startswith(prompt), sample
        assert len(prompt) < len(sample.encode("utf-8")) <= len(prompt) + 8


def test_train_uses_the_device_defaults(trained):
    model, _, _ = trained
    expected = training.device_defaults().dtype_policy
    assert cli._load(str(model)).dtype_policy.name == expected


def test_an_unknown_dtype_policy_is_refused():
    with pytest.raises(SystemExit, match="float8"):
        cli.main(["train", "--preset", "gpt_tiny", "--dtype-policy", "float8"])


def test_generate_prints_what_the_saved_model_generates(trained, capsys):
    model, _, _ = trained
    prompts = ["In the", "And God"]
    arguments = ["--sampler", "greedy", "--max-new-tokens", "5"]
    cli.main(["generate", str(model), "--prompt", prompts[0], "--prompt", prompts[1]]
             + arguments)  # fmt: skip
    printed = capsys.readouterr().out.splitlines()[-2:]
    loaded = keras.models.load_model(model)
    expected = [loaded.generate(p, max_new_tokens=5, sampler="greedy") for p in prompts]
    assert printed == expected


def test_evaluate_prints_the_validation_cross_entropy(trained, capsys):
    model, text, _ = trained
    cli.main(["evaluate", str(model), "--data", str(text)])
    out = capsys.readouterr().out
    match = re.search(r"loss ([\d.]+), perplexity ([\d.]+)", out)
    loss, perplexity = float(match[1]), float(match[2])
    assert perplexity == pytest.approx(math.exp(loss), rel=1e-3)
    # The mean next-byte cross-entropy over the validation windows, in float64.
    loaded = keras.models.load_model(model)
    _, validation = language_model_datasets(
        text.read_text(encoding="utf-8"), loaded.tokenizer,
        sequence_length=loaded.max_sequence_length, batch_size=32, seed=0,
    )  # fmt: skip
    losses = []
    for inputs, labels in validation:
        logits = np.asarray(loaded(inputs), "float64")
        logits -= logits.max(-1, keepdims=True)
        log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
        picked = np.take_along_axis(log_probs, np.asarray(labels)[..., None], -1)
        losses.append(-picked[..., 0])
    assert loss == pytest.approx(np.concatenate(losses).mean(), abs=2e-4)


def test_presets_lists_the_zoo(capsys):
    cli.main(["presets"])
    assert "gpt_micro" in capsys.readouterr().out.split()


@pytest.mark.parametrize(
    "content, message",
    [(None, "no such file"), (b"", "is empty"), (b"\xff\xfe\xfa", "not UTF-8")],
)
def test_bad_data_files_get_clear_errors(tmp_path, content, message):
    path = tmp_path / "data.txt"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(SystemExit, match=message):
        cli.main(["train", "--data", str(path), "--preset", "gpt_tiny"])


def test_missing_model_file(tmp_path):
    with pytest.raises(SystemExit, match="no such model file"):
        cli.main(["generate", str(tmp_path / "none.keras"), "--prompt", "x"])


def test_bad_flag_values_are_refused():
    with pytest.raises(SystemExit):
        cli.main(["train", "--epochs", "0"])

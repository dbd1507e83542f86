"""The keras-tfm command, end to end on a small text, and its errors."""

import pytest

from keras_tfm import cli, training
from keras_tfm.datasets import load_default_corpus


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cli")
    text = folder / "corpus.txt"
    text.write_text(load_default_corpus()[:20_000], encoding="utf-8")
    model = folder / "tiny.keras"
    cli.main(
        [
            "train", "--data", str(text), "--preset", "gpt_tiny", "--epochs", "1",
            "--batch-size", "8", "--sequence-length", "32", "--output", str(model),
            "--max-new-tokens", "8", "--prompt", "And",
        ]
    )  # fmt: skip
    return model, text


def test_train_writes_a_model_and_prints_samples(trained, capsys):
    model, _ = trained
    assert model.is_file() and model.stat().st_size > 0


def test_train_uses_the_device_defaults(trained):
    model, _ = trained
    expected = training.device_defaults().dtype_policy
    assert cli._load(str(model)).dtype_policy.name == expected


def test_an_unknown_dtype_policy_is_refused():
    with pytest.raises(SystemExit, match="float8"):
        cli.main(["train", "--preset", "gpt_tiny", "--dtype-policy", "float8"])


def test_generate_continues_the_prompt(trained, capsys):
    model, _ = trained
    cli.main(["generate", str(model), "--prompt", "In the", "--max-new-tokens", "5"])
    out = capsys.readouterr().out.strip().splitlines()[-1]
    assert out.startswith("In the") and len(out) > len("In the")


def test_evaluate_prints_loss_and_perplexity(trained, capsys):
    model, text = trained
    cli.main(["evaluate", str(model), "--data", str(text)])
    out = capsys.readouterr().out
    assert "loss" in out and "perplexity" in out


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

"""The keras-tfm command, end to end on a small text, and its errors."""

import os
import re
import subprocess
import sys
from pathlib import Path

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


# Lines TensorFlow, XLA and absl write on their own: absl's log prefix
# (severity, date, time, thread, file:line), the absl pre-init notice, and the
# phrases of the start-up lines seen on CPU machines.
TF_LOG_LINES = re.compile(
    r"^[IWEF]\d{4} \d\d:\d\d:\d+\.\d+"
    r"|absl::InitializeLog|oneDNN custom operations|cuda drivers|cuInit"
    r"|XLA service|Ignoring Assert|tensorflow/\w+|WARNING:(tensorflow|absl)",
    re.MULTILINE | re.IGNORECASE,
)


def run_command(*args):
    """The installed command's module, in a fresh process: stdout + stderr."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TF_CPP")}
    result = subprocess.run(
        [sys.executable, "-m", "keras_tfm_launcher", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout + result.stderr


def test_the_console_script_is_the_quieting_launcher():
    import tomllib

    pyproject = Path(cli.__file__).resolve().parent.parent / "pyproject.toml"
    if not pyproject.is_file():
        pytest.skip("not a source checkout")
    scripts = tomllib.loads(pyproject.read_text())["project"]["scripts"]
    assert scripts["keras-tfm"] == "keras_tfm_launcher:main"


def test_train_prints_no_tensorflow_logs(tmp_path):
    text = tmp_path / "corpus.txt"
    text.write_text(load_default_corpus()[:4_000], encoding="utf-8")
    # A peak far below this model's rate: MFU must be refused, not > 100%.
    out = run_command(
        "train", "--data", str(text), "--preset", "gpt_tiny", "--epochs", "2",
        "--batch-size", "8", "--sequence-length", "32", "--peak-flops", "1000",
        "--output", str(tmp_path / "m.keras"), "--max-new-tokens", "4",
        "--prompt", "And",
    )  # fmt: skip
    assert not TF_LOG_LINES.search(out), out
    assert "Peak for MFU: 1e+03 FLOP/s (--peak-flops)." in out
    # One Keras line per epoch, with tokens/s, then the summary and a sample.
    epochs = re.findall(r"^\d+/\d+ - .*tokens_per_second: [\d.]+", out, re.M)
    assert len(epochs) == 2, out
    assert re.search(
        r"^Last epoch: [\d,]+ tokens/s, MFU unknown: .* underestimated", out, re.M
    )
    assert not re.search(r"MFU \d+\.\d+%", out)
    assert "\n>>> And" in out


def test_verbose_brings_the_tensorflow_logs_back():
    # TensorFlow prints start-up lines on every machine (oneDNN, CPU
    # features or CUDA), so the pattern above must find some of them.
    # (The quiet case is test_train_prints_no_tensorflow_logs.)
    assert TF_LOG_LINES.search(run_command("presets", "--verbose"))


def test_the_stderr_filter_drops_only_absl_lines():
    launcher = pytest.importorskip("keras_tfm_launcher")
    dropped = [
        b"WARNING: All log messages before absl::InitializeLog() is called are "
        b"written to STDERR\n",
        b"I0000 00:00:1795424492.382020   10272 port.cc:153] oneDNN custom\n",
        b"W0000 00:00:1795424497.971234    4930 assert_op.cc:38] Ignoring Assert\n",
        b"E1123 09:00:01.000001 4930 cuda_platform.cc:52] failed call to cuInit\n",
    ]
    kept = [
        b"keras-tfm: no such file: corpus.txt\n",
        b"Traceback (most recent call last):\n",
        b"I0000 is not a log line without the rest of the prefix\n",
    ]
    assert all(launcher._ABSL_LINE.match(line) for line in dropped)
    assert not any(launcher._ABSL_LINE.match(line) for line in kept)


def test_generate_prints_the_streamed_sample_equal_to_the_whole(trained, capsys):
    """Greedy: the pieces printed as they come join into `generate`'s output."""
    model, _ = trained
    cli.main(
        ["generate", str(model), "--prompt", "In the", "--max-new-tokens", "6",
         "--sampler", "greedy"]
    )  # fmt: skip
    out = capsys.readouterr().out
    expected = cli._load(str(model)).generate("In the", max_new_tokens=6)
    assert expected.startswith("In the") and out.endswith(expected + "\n")

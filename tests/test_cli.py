"""The keras-tfm command, end to end on a small text, and its errors."""

import bz2
import contextlib
import io
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import pytest

from keras_tfm import cli, datasets, training
from keras_tfm.datasets import load_default_corpus
from keras_tfm.training import language_model_recipe
from tests import tiny_chat


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """`keras-tfm train` in a fresh process (as a user runs it, so its output
    shows TensorFlow's log lines if any leak): the model, text and output."""
    folder = tmp_path_factory.mktemp("cli")
    text = folder / "corpus.txt"
    text.write_text(load_default_corpus()[:20_000], encoding="utf-8")
    model = folder / "tiny.keras"
    printed = run_command(
        # 6 epochs (400 steps of 6 ms): past the plateau of a model that
        # knows only the bytes' frequencies (about 300 steps).
        "train", "--data", str(text), "--preset", "gpt_tiny", "--epochs", "6",
        "--vocabulary-size", "256",  # one token a byte: the tests below
        "--dropout", "0",  # (the default 0.1 suits the BPE recipe)
        # A peak far below this model's rate: MFU must be refused, not > 100%.
        "--peak-flops", "1000",
        "--batch-size", "8", "--sequence-length", "32", "--output", str(model),
        "--max-new-tokens", "8", "--prompt", "And", "--prompt", "Moses",
    )  # fmt: skip
    return model, text, printed


def test_train_writes_a_model_and_prints_a_sample_per_prompt(trained):
    model, _, printed = trained
    assert model.is_file() and model.stat().st_size > 0
    samples = re.findall(r"^>>> (.*)$", printed, re.MULTILINE)
    assert len(samples) == 2, printed
    # Each continues its prompt by at most --max-new-tokens bytes (byte-level).
    for prompt, sample in zip(["And", "Moses"], samples, strict=True):
        assert sample.startswith(prompt), sample
        assert len(prompt) < len(sample.encode("utf-8")) <= len(prompt) + 8


def test_train_learns_more_than_byte_frequencies(trained):
    """The validation loss beats a unigram model of the training bytes (their
    frequencies, add-one smoothed) scored on the same validation bytes."""
    _, text, printed = trained
    train, held_out = language_model_recipe.text_split(text.read_text("utf-8"))
    train = np.frombuffer(train.encode(), np.uint8)
    held_out = np.frombuffer(held_out.encode(), np.uint8)
    windows = len(held_out) // 33  # --sequence-length 32, plus one
    validation = held_out[: 33 * windows].reshape(-1, 33)[:, 1:]
    counts = np.bincount(train, minlength=256) + 1.0
    unigram = -np.log(counts / counts.sum())[validation].mean()
    loss = float(re.search(r"validation loss ([\d.]+) nats/byte", printed)[1])
    assert 2.5 < unigram < 3.5  # English bytes: about 4 bits each
    assert loss < unigram - 0.2, (loss, unigram)


@pytest.fixture(scope="module")
def trained_model(trained):
    from keras_tfm import saving

    return saving.load_model(trained[0])


@pytest.fixture
def one_trained_model(trained, trained_model, monkeypatch):
    """The command loads the module's one copy of the trained model: a new
    copy would trace its decoding loop again for the same answer."""
    from keras_tfm import saving

    load = saving.load_model

    def load_model(path, **kwargs):
        return trained_model if Path(path) == trained[0] else load(path, **kwargs)

    monkeypatch.setattr(saving, "load_model", load_model)
    return trained_model


def test_train_uses_the_device_defaults(trained):
    model, _, _ = trained
    expected = training.device_defaults().dtype_policy
    assert cli.resolve_model(str(model)).dtype_policy.name == expected


def test_an_unknown_dtype_policy_is_refused():
    with pytest.raises(SystemExit, match="float8"):
        cli.main(["train", "--preset", "gpt_tiny", "--dtype-policy", "float8"])


def test_generate_prints_what_the_saved_model_generates(
    trained, one_trained_model, capsys
):
    model, _, _ = trained
    prompts = ["In the", "And God"]
    arguments = ["--sampler", "greedy", "--max-new-tokens", "5"]
    cli.main(["generate", str(model), "--prompt", prompts[0], "--prompt", prompts[1]]
             + arguments)  # fmt: skip
    printed = capsys.readouterr().out.splitlines()[-2:]
    expected = [
        one_trained_model.generate(p, max_new_tokens=5, sampler="greedy")
        for p in prompts
    ]
    assert printed == expected


def test_evaluate_prints_the_validation_cross_entropy(trained, capsys):
    model, text, _ = trained
    cli.main(["evaluate", str(model), "--data", str(text)])
    out = capsys.readouterr().out
    match = re.search(r"loss ([\d.]+) nats/token, perplexity ([\d.]+)", out)
    loss, perplexity = float(match[1]), float(match[2])
    assert perplexity == pytest.approx(math.exp(loss), rel=1e-3)
    # A byte-level model: a byte a token, so per byte is per token, as
    # `train` prints it; and bzip2's figure on the same bytes beside it.
    per_byte = re.search(r"; ([\d.]+) nats/byte \(1.00 bytes a token\)", out)
    assert float(per_byte[1]) == pytest.approx(loss, abs=1e-4)
    assert 0.5 < float(re.search(r"bzip2 -9 .* ([\d.]+)$", out.strip())[1]) < 5
    # The mean next-byte cross-entropy over the validation windows, in float64.
    loaded = keras.models.load_model(model)
    # The held-out part (every tenth block), in disjoint windows of L + 1 bytes.
    held_out = language_model_recipe.text_split(text.read_text(encoding="utf-8"))[1]
    ids = np.frombuffer(held_out.encode(), np.uint8).astype("int32")
    window = loaded.max_sequence_length + 1
    windows = ids[: window * (len(ids) // window)].reshape(-1, window)
    losses = []
    for inputs, labels in [(windows[:, :-1], windows[:, 1:])]:
        logits = np.asarray(loaded(inputs), "float64")
        logits -= logits.max(-1, keepdims=True)
        log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
        picked = np.take_along_axis(log_probs, np.asarray(labels)[..., None], -1)
        losses.append(-picked[..., 0])
    assert loss == pytest.approx(np.concatenate(losses).mean(), abs=2e-4)


def test_presets_lists_weights_task_parameters_and_command(capsys):
    from keras_tfm import zoo

    cli.main(["presets"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["preset", "weights", "task", "parameters", "command"]
    rows = {line.split()[0]: line.split(maxsplit=4)[1:] for line in lines[1:]}
    assert {name: row[0] for name, row in rows.items()} == {
        name: zoo.preset_weights(name) for name in zoo.list_presets()
    }
    # The task is the class that from_preset builds, the parameter count
    # that of the built model (checked on the presets that build quickly).
    for name in ["gpt_nano", "fortunes_classifier", "transformer_tiny", "kjv_gpt"]:
        model = zoo.from_preset(name)
        assert rows[name][1] == type(model).__name__
        assert int(rows[name][2].replace(",", "")) == model.count_params()
    assert rows["kjv_gpt"][3] == 'keras-tfm generate kjv_gpt --prompt "..."'
    assert rows["gpt_micro"][3] == "keras-tfm train --preset gpt_micro"
    assert rows["fortunes_classifier"][3].startswith("keras-tfm classify ")
    assert rows["smollm2_135m_instruct"][3].startswith("keras-tfm chat ")


@pytest.fixture(scope="module")
def kjv_gpt():
    from keras_tfm import zoo

    return zoo.from_preset("kjv_gpt")


@pytest.fixture
def one_kjv_gpt(kjv_gpt, monkeypatch):
    """`zoo.from_preset("kjv_gpt")` gives the module's one kjv_gpt: a new
    model would trace its decoding loop again (seconds) for the same answer.
    Returns the names the command asked for."""
    from keras_tfm import zoo

    asked, load = [], zoo.from_preset

    def from_preset(name, **kwargs):
        asked.append(name)
        return kjv_gpt if name == "kjv_gpt" and not kwargs else load(name, **kwargs)

    monkeypatch.setattr(zoo, "from_preset", from_preset)
    monkeypatch.setattr("keras_tfm.zoo.named_model.from_preset", from_preset)
    return asked


@pytest.mark.slow  # every suggested command in turn
def test_each_suggested_command_runs(capsys, one_kjv_gpt):
    """The commands `presets` suggests for the trained presets work as shown."""
    cli.main(["generate", "kjv_gpt", "--prompt", "And God said",
              "--max-new-tokens", "4", "--sampler", "greedy"])  # fmt: skip
    assert capsys.readouterr().out.startswith("And God said")
    cli.main(["generate", "translator_de_en", "--prompt", "Ich habe einen Hund.",
              "--max-new-tokens", "16", "--sampler", "greedy"])  # fmt: skip
    assert capsys.readouterr().out == "I have a dog.\n"  # as the README says
    cli.main(["classify", "fortunes_classifier", "--text", "Real programmers use vi."])
    assert capsys.readouterr().out == "computers\tReal programmers use vi.\n"


def test_generate_takes_a_preset_as_it_takes_a_file(capsys, one_kjv_gpt, kjv_gpt):
    cli.main(["generate", "kjv_gpt", "--prompt", "In the beginning",
              "--max-new-tokens", "6", "--sampler", "greedy"])  # fmt: skip
    assert one_kjv_gpt == ["kjv_gpt"]
    expected = kjv_gpt.generate("In the beginning", max_new_tokens=6, sampler="greedy")
    assert capsys.readouterr().out == expected + "\n"


def test_a_name_that_is_neither_file_nor_preset_names_both(tmp_path):
    missing = str(tmp_path / "kjv_gpt.keras")
    with pytest.raises(SystemExit, match="neither a model file .* nor a preset"):
        cli.main(["evaluate", missing])


def test_chat_prints_the_answer_of_the_preset_it_names(smollm2, capsys, monkeypatch):
    from keras_tfm import zoo

    # A one-layer Llama with SmolLM2's tokenizer and template, whose weights
    # plant the answer (tests/tiny_chat.py), stands in for the preset: the
    # command's path is the same, SmolLM2's loop costs ~15 CPU-s to compile,
    # and SmolLM2's own answer is transformers' in
    # tests/zoo/test_installed_checkpoints.py.
    model, asked = tiny_chat.tiny_chat_model(smollm2.preprocessor.tokenizer), []
    load = lambda name: asked.append(name) or model  # noqa: E731
    monkeypatch.setattr(zoo, "from_preset", load)
    monkeypatch.setattr("keras_tfm.zoo.named_model.from_preset", load)
    cli.main(["chat", tiny_chat.QUESTION, "--max-new-tokens", "16"])
    assert capsys.readouterr().out == tiny_chat.ANSWER + "\n"
    assert asked == ["smollm2_135m_instruct"]  # the command's default model


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


def test_the_default_output_is_named_for_the_preset_and_text(monkeypatch):
    """Not kjv_gpt.keras: the zoo's kjv_gpt is another model (BPE, 12.2M)."""
    from keras_tfm import zoo

    written = []

    def compile_only(model, *args, **kwargs):
        model.compile(loss=training.TokenCrossEntropy(ignore_class=None))

    monkeypatch.setattr(language_model_recipe, "train_language_model", compile_only)
    monkeypatch.setattr(
        language_model_recipe, "atomic_save", lambda model, path: written.append(path)
    )
    monkeypatch.setattr(language_model_recipe, "_peak_flops", lambda *a: (1.0, "test"))
    # The shipped text's start: the name, not 4 MB of tokenizing, is tested.
    genesis = load_default_corpus()[:20_000]
    monkeypatch.setattr(datasets, "load_default_corpus", lambda: genesis)
    with contextlib.redirect_stdout(io.StringIO()):
        cli.main(["train", "--preset", "gpt_tiny", "--no-samples", "--no-jit",
                  "--dtype-policy", "float32", "--vocabulary-size", "300"])  # fmt: skip
    assert written == ["gpt_tiny_kjv.keras"]
    assert Path(written[0]).stem not in zoo.list_presets()


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
        [sys.executable, "-m", "keras_tfm", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout + result.stderr


def test_the_console_script_is_the_quieting_launcher():
    import tomllib

    pyproject = Path(cli.__file__).resolve().parents[2] / "pyproject.toml"
    if not pyproject.is_file():
        pytest.skip("not a source checkout")
    scripts = tomllib.loads(pyproject.read_text())["project"]["scripts"]
    assert scripts["keras-tfm"] == "keras_tfm.launcher:main"


def test_help_lists_every_command_without_tensorflow_logs():
    out = run_command("--help")
    assert not TF_LOG_LINES.search(out), out
    listed = re.search(r"\{([\w,]+)\}", out)[1].split(",")
    assert listed == list(cli.COMMANDS), out


def test_train_prints_no_tensorflow_logs(trained):
    _, text, out = trained
    assert not TF_LOG_LINES.search(out), out
    assert "Peak for MFU: 1e+03 FLOP/s (--peak-flops)." in out
    # One Keras line per epoch, and one of tokens/s formatted (Keras would
    # print them as raw floats), then the summary and a sample.
    epochs = re.findall(r"^\d+/\d+ - .*loss: [\d.]+", out, re.M)
    assert len(epochs) == 6 and "tokens_per_second" not in out, out
    rate = r"^Epoch \d: [\d,]+ tokens/s \(all tokens\), MFU unknown"
    rates = re.findall(rate, out, re.M)
    assert len(rates) == 6, out
    assert re.search(
        r"^Last epoch: [\d,]+ tokens/s, MFU unknown: .* underestimated", out, re.M
    )
    assert not re.search(r"MFU \d+\.\d+%", out)
    assert "\n>>> And" in out
    # The bzip2 anchor: the held-out windows of 32 + 1 bytes (every tenth
    # block, `text_split`), coded after the training text.
    train, held_out = language_model_recipe.text_split(text.read_text("utf-8"))
    train, held_out = train.encode(), held_out.encode()
    held_out = held_out[: 33 * (len(held_out) // 33)]
    extra = len(bz2.compress(train + held_out, 9)) - len(bz2.compress(train, 9))
    anchor = extra * 8 * math.log(2) / len(held_out)
    loss = float(re.search(r"validation loss ([\d.]+) nats/byte", out)[1])
    model_row = re.search(r"^model \(gpt_tiny\) +([\d.]+)$", out, re.M)
    assert float(model_row[1]) == pytest.approx(loss, abs=1e-3)
    anchor_row = re.search(r"^bzip2 -9 given the training text +([\d.]+)$", out, re.M)
    assert float(anchor_row[1]) == pytest.approx(anchor, abs=1e-4)


def test_verbose_brings_the_tensorflow_logs_back():
    # TensorFlow prints start-up lines on every machine (oneDNN, CPU
    # features or CUDA), so the pattern above must find some of them.
    # (The quiet case is test_train_prints_no_tensorflow_logs.)
    assert TF_LOG_LINES.search(run_command("presets", "--verbose"))


def test_the_stderr_filter_drops_only_absl_lines():
    from keras_tfm._tensorflow_logs import ABSL_LINE

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
    assert all(ABSL_LINE.match(line) for line in dropped)
    assert not any(ABSL_LINE.match(line) for line in kept)


def test_deferred_packages_look_absent_only_while_keras_is_imported(
    tmp_path, monkeypatch
):
    from keras_tfm import launcher

    assert set(launcher.DEFERRED) == {"sklearn", "matplotlib"}
    (tmp_path / "deferred_probe.py").write_text("value = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with launcher._deferred_imports(("deferred_probe",)):
        with pytest.raises(ModuleNotFoundError, match="deferred_probe"):
            import deferred_probe  # noqa: F401
    import deferred_probe

    assert deferred_probe.value == 1
    monkeypatch.delitem(sys.modules, "deferred_probe")


def test_generate_prints_the_streamed_sample_equal_to_the_whole(
    trained, one_trained_model, capsys
):
    """Greedy: the pieces printed as they come join into `generate`'s output."""
    model, *_ = trained
    cli.main(
        ["generate", str(model), "--prompt", "In the", "--max-new-tokens", "6",
         "--sampler", "greedy"]
    )  # fmt: skip
    out = capsys.readouterr().out
    expected = one_trained_model.generate("In the", max_new_tokens=6)
    assert expected.startswith("In the") and out.endswith(expected + "\n")


@pytest.mark.parametrize(
    "weights, quantized_to", [("int8", "int8_weight_only"), ("bfloat16", "bfloat16")]
)
def test_generate_stores_the_weights_as_asked(trained, capsys, monkeypatch,
                                              weights, quantized_to):  # fmt: skip
    model, *_ = trained
    loaded = []
    load = cli.loading.resolve_model
    monkeypatch.setattr(
        cli.loading,
        "resolve_model",
        lambda *a, **k: loaded.append(load(*a, **k)) or loaded[-1],
    )
    cli.main(["generate", str(model), "--prompt", "In the", "--max-new-tokens", "5",
              "--sampler", "greedy", "--weights", weights])  # fmt: skip
    (used,) = loaded
    assert used.quantized_to == quantized_to
    expected = used.generate("In the", max_new_tokens=5, sampler="greedy")
    assert capsys.readouterr().out.splitlines()[-1] == expected


def test_weights_of_a_quantized_model_are_refused_clearly(trained, tmp_path):
    model, *_ = trained
    quantized = keras.models.load_model(model, compile=False)
    quantized.quantize("int8")
    path = tmp_path / "int8.keras"
    quantized.save(path)
    with pytest.raises(SystemExit, match="--weights bfloat16: .*quantized to 'int8'"):
        cli.main(["generate", str(path), "--prompt", "In", "--weights", "bfloat16"])


def test_the_readme_commands_parse_and_name_models_that_exist():
    """Each `keras-tfm ...` command of the README's shell blocks is valid, and
    names a preset or the file that `keras-tfm train` writes by default."""
    import shlex

    from keras_tfm import zoo

    readme = (Path(cli.__file__).resolve().parents[2] / "README.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)```", readme, re.S)
    commands = [
        shlex.split(part, comments=True)[1:]
        for block in blocks
        for line in block.splitlines()
        for part in line.split("&&")
        if part.strip().startswith("keras-tfm ")
    ]
    assert [argv[0] for argv in commands][:4] == ["train", "generate", "evaluate",
                                                  "generate"]  # fmt: skip
    trained = f"gpt_micro_{cli.SHIPPED_TEXT_NAME}.keras"  # train's default output
    for argv in commands:
        args = cli.build_parser().parse_args(argv)
        if hasattr(args, "model"):
            assert args.model in [*zoo.list_presets(), trained], argv


def test_sampler_settings_the_model_does_not_take_are_refused():
    class Model:  # a generate without top-k sampling
        def generate(self, inputs, max_new_tokens, sampler="greedy", seed=None):
            return inputs

    argv = ["generate", "m", "--prompt", "x", "--sampler", "top_k"]
    with pytest.raises(SystemExit, match="takes no --temperature, --top-k"):
        cli.generate.generate_settings(Model(), cli.build_parser().parse_args(argv))
    # Without --sampler: the model's own default, nothing it does not take.
    args = cli.build_parser().parse_args(["generate", "m", "--prompt", "x"])
    assert cli.generate.generate_settings(Model(), args) == {}


class _Chatter:
    """A stand-in chat model: greedy by default, or its `generation_config`."""

    def __init__(self, generation_config=None):
        self.generation_config = generation_config
        self.asked = []

    def chat(self, message, **settings):
        self.asked.append(settings)
        return iter(["Fine."])


@pytest.mark.parametrize(
    "flags",
    [
        ["--min-p", "0.1"],
        ["--temperature", "0.7"],
        ["--top-p", "0.5", "--temperature", "0.7"],
        ["--sampler", "greedy", "--min-p", "0.1"],
    ],
)
def test_chat_refuses_a_flag_the_sampler_does_not_read(monkeypatch, flags):
    # The model decodes greedily (no preset settings): --min-p and
    # --temperature would be ignored, so they are refused, naming the flags,
    # with the message the Python API gives for the same setting.
    from keras_tfm.generation import GenerationConfig

    model = _Chatter()
    monkeypatch.setattr(cli.loading, "language_model", lambda *a, **k: model)
    with pytest.raises(SystemExit) as refused:
        cli.main(["chat", "Name a sea.", *flags])
    message = str(refused.value)
    named = [f for f in flags if f.startswith("--") and f != "--sampler"]
    assert message.startswith(f"keras-tfm: {', '.join(sorted(named))}")
    with pytest.raises(ValueError) as api:
        GenerationConfig(**{f[2:].replace("-", "_"): 0.5 for f in named})
    # The API's message, with each setting written as its flag.
    expected = str(api.value).split(" Received")[0]
    for flag in named:
        expected = expected.replace(f"`{flag[2:].replace('-', '_')}`", f"`{flag}`")
    assert expected in message
    assert model.asked == []  # nothing was answered


def test_chat_sends_the_flags_the_sampler_reads(monkeypatch):
    from keras_tfm.chat import entry_writer
    from keras_tfm.generation import GenerationConfig

    monkeypatch.setattr(entry_writer, "write_chat_entry", lambda *args, **kwargs: None)
    monkeypatch.setattr(entry_writer, "start_chat_entry", lambda *args: None)
    model = _Chatter()
    monkeypatch.setattr(cli.loading, "language_model", lambda *a, **k: model)
    cli.main(["chat", "Name a sea.", "--sampler", "top_p", "--min-p", "0.1"])
    # With --sampler top_p: min-p as given, the CLI's temperature and top-p.
    assert model.asked[-1] == {
        "max_new_tokens": 256, "stream": True, "sampler": "top_p", "min_p": 0.1,
        "temperature": 1.0, "top_p": 0.9,
    }  # fmt: skip
    # A preset that samples (its generation_config) reads --temperature.
    model = _Chatter(GenerationConfig(sampler="top_p", top_p=0.9))
    cli.main(["chat", "Name a sea.", "--temperature", "0.7"])
    assert model.asked[-1] == {
        "max_new_tokens": 256, "stream": True, "temperature": 0.7,
    }  # fmt: skip


def test_generate_refuses_a_flag_the_sampler_does_not_read():
    class Model:  # a generate that takes a generation_config: checked
        generation_config = None

        def generate(
            self, inputs, max_new_tokens, sampler=None, top_k=None,
            temperature=None, generation_config=None, stream=False,
        ):  # fmt: skip
            return inputs

    argv = ["generate", "m", "--prompt", "x", "--sampler", "greedy", "--top-k", "3"]
    with pytest.raises(SystemExit, match="^keras-tfm: --top-k with the greedy"):
        cli.generate.generate_settings(Model(), cli.build_parser().parse_args(argv))
    # Without --sampler: top-k sampling, the CLI's temperature and top-k.
    args = cli.build_parser().parse_args(["generate", "m", "--prompt", "x"])
    assert cli.generate.generate_settings(Model(), args) == {
        "sampler": "top_k", "temperature": 0.8, "top_k": 10, "stream": True,
    }  # fmt: skip


def test_every_weights_value_works_on_a_sentence_encoder_or_ends_in_one_line():
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "cat", "dog", "sat"]
    from keras_tfm.convert import HFBertTokenizer
    from keras_tfm.models import (
        EncoderBackbone,
        SentenceEncoder,
        TextClassifierPreprocessor,
    )

    def encoder():
        backbone = EncoderBackbone(
            vocabulary_size=len(words), num_layers=1, num_heads=2, hidden_dim=8,
            intermediate_dim=16, max_sequence_length=16,
        )  # fmt: skip
        tokenizer = HFBertTokenizer(words, lowercase=True)
        return SentenceEncoder(backbone, TextClassifierPreprocessor(tokenizer, 16))

    model = encoder()
    float32 = model.encode("a cat sat")
    int8 = cli.loading.store_weights(model, "int8")
    assert int8.quantized_to == "int8_weight_only"
    # Weight-only int8 keeps the embedding close (unit vectors: cosine ~ 1).
    assert float(int8.encode("a cat sat") @ float32) > 0.99
    restored = SentenceEncoder.from_config(int8.get_config())
    assert restored.quantized_to == "int8_weight_only"
    for weights in ("bfloat16", "int8_blocks"):
        with pytest.raises(SystemExit) as caught:
            cli.loading.store_weights(encoder(), weights)
        message = str(caught.value)
        assert message.startswith(f"keras-tfm: --weights {weights}: ")
        assert "\n" not in message and "Embedding" in message
    with pytest.raises(SystemExit, match="keeps its weights in float32"):
        cli.loading.store_weights(keras.Sequential([keras.layers.Dense(2)]), "int8")


def test_api_errors_name_the_flags_that_set_them(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "file").write_text("x")
    args = cli.build_parser().parse_args(["export", "gpt_tiny", str(tmp_path / "out")])
    message = cli.in_flags(
        "`directory` exists and is not empty; pass overwrite=True to replace it. "
        "Received: max_new_tokens=0", args.flags
    )  # fmt: skip
    assert message == (
        "`directory` exists and is not empty; pass --overwrite to replace it. "
        "Received: --max-new-tokens 0"
    )


@pytest.fixture(scope="module")
def learned_positions(tmp_path_factory):
    """A saved one-layer byte-level GPT whose learned positions stop at 16."""
    import keras_hub

    from tests.builders import causal_lm

    model = causal_lm(
        vocabulary_size=256, num_layers=1, num_heads=2, hidden_dim=16,
        intermediate_dim=32, max_sequence_length=16,
        tokenizer=keras_hub.tokenizers.ByteTokenizer(),
    )  # fmt: skip
    path = tmp_path_factory.mktemp("learned") / "tiny.keras"
    model.save(path)
    return path


def test_generate_caps_its_default_by_the_positions_left(learned_positions, capsys):
    # "abcd" is 4 bytes, one token each: 16 - 4 = 12 positions are left.
    cli.main(["generate", str(learned_positions), "--prompt", "abcd",
              "--prompt", "ab", "--sampler", "greedy"])  # fmt: skip
    out, err = capsys.readouterr()
    assert err == (
        "keras-tfm: --max-new-tokens 12: the positions left of the model's 16 "
        "(the default is 200).\n"
    )
    # The longest prompt sets the cap; each answer is at most 12 bytes more.
    assert out.startswith("abcd") and "\nab" in out
    assert len(out) <= 16 + 1 + 14 + 1  # a character per byte at most


@pytest.mark.parametrize(
    "arguments, message",
    [(["--prompt", "abcd", "--max-new-tokens", "13"],
      "--max-new-tokens 13 does not fit: 12 of the model's 16 positions are "
      "left after the prompt; pass at most 12."),
     (["--prompt", "a" * 16], "the prompt fills the model's 16 positions")],
)  # fmt: skip
def test_generate_refuses_what_does_not_fit_in_one_line(
    learned_positions, arguments, message
):
    with pytest.raises(SystemExit) as refused:
        cli.main(["generate", str(learned_positions), *arguments])
    assert str(refused.value).startswith("keras-tfm: ")
    assert message in str(refused.value) and "\n" not in str(refused.value)


def test_evaluate_refuses_windows_longer_than_the_model(learned_positions):
    with pytest.raises(SystemExit) as refused:
        cli.main(["evaluate", str(learned_positions), "--sequence-length", "17"])
    assert str(refused.value) == (
        "keras-tfm: --sequence-length 17 exceeds the model's 16 positions; "
        "pass at most 16."
    )


def test_a_translator_answers_as_long_as_it_can_by_default(capsys):
    from tests.builders import seq2seq_lm

    model = seq2seq_lm(
        vocabulary_size=32, num_encoder_layers=1, num_decoder_layers=1,
        num_heads=2, hidden_dim=8,
        intermediate_dim=16, max_sequence_length=128, start_token_id=1,
    )  # fmt: skip
    args = cli.build_parser().parse_args(["generate", "m", "--prompt", "x"])
    args.prompt = [[5, 6, 7]]  # ids: this translator has no tokenizer
    # Its start token takes one of the 128 decoder positions.
    assert cli.generate.max_new_tokens(model, args) == 127
    assert "--max-new-tokens 127" in capsys.readouterr().err
    assert cli.generate.max_new_tokens(object(), args) == cli.generate.MAX_NEW_TOKENS
    args.max_new_tokens = 5
    assert cli.generate.max_new_tokens(model, args) == 5


def test_chat_caps_its_default_by_the_positions_the_prompt_leaves(smollm2, capsys):
    from tests.builders import causal_lm

    tokenizer = smollm2.preprocessor.tokenizer
    model = causal_lm(
        vocabulary_size=tokenizer.vocabulary_size(), num_layers=1, num_heads=2,
        hidden_dim=16, intermediate_dim=32, max_sequence_length=64,
        tokenizer=tokenizer,
    )  # fmt: skip
    message = [{"role": "user", "content": "Hi"}]
    left = 64 - len(tokenizer(tokenizer.apply_chat_template(message)))
    assert 0 < left < 64
    args = cli.build_parser().parse_args(["chat", "Hi"])
    assert cli.chat.answer_length(model, args) == left
    assert f"--max-new-tokens {left}: " in capsys.readouterr().err
    args = cli.build_parser().parse_args(["chat", "Hi", "--max-new-tokens", "64"])
    with pytest.raises(SystemExit, match=f"pass at most {left}"):
        cli.chat.answer_length(model, args)
    assert cli.chat.answer_length(smollm2, args) == 64  # rotary: no limit

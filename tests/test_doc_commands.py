"""Every `keras-tfm` command the README and the guides show parses as shown
and names a preset or a file that exists; the README's own commands run as
shown, in order, on what the one before wrote (tests/doc_commands.py reads
them).

The README's `train` and `evaluate` run with small limits (a short text,
48-token rows); its `generate` then runs with its own defaults, which must
fit that model.
Commands that load SmolLM2, serve, export or benchmark are parsed only:
their paths run in tests/test_preset_commands.py (the chat line),
tests/serving and tests/export.
"""

import contextlib
import io

import pytest

from keras_tfm import cli, launcher, zoo
from tests.doc_commands import (
    ROOT,
    keras_tfm_commands,
    python_scripts,
    shell_commands,
)

COMMANDS = list(keras_tfm_commands())
# A file a guide names for the user's own model.
PLACEHOLDER_FILES = {"my_model.keras"}
# The README's `train` writes this (checked where it runs, below).
TRAINED_FILE = "gpt_micro_kjv.keras"
# What "..." stands for in a shown command.
USER_TEXT = "What is the capital of France?"
RUN = {"train", "generate", "evaluate", "presets", "classify", "cache"}
TEXT = "In the beginning God created the heaven and the earth. " * 40


def _argv(shown):
    return [USER_TEXT if word == "..." else word for word in shown]


def test_the_docs_show_commands_of_every_kind():
    kinds = {argv[0] for _, _, argv in COMMANDS}
    assert {"train", "generate", "chat", "serve", "export", "classify"} <= kinds
    assert len(COMMANDS) >= 20


def test_every_shown_command_parses_and_names_what_exists():
    presets = set(zoo.list_presets())
    problems = []
    for page, line, shown in COMMANDS:
        try:
            args = cli.build_parser().parse_args(_argv(shown))
        except SystemExit:
            problems.append(f"{page}: `{line}` does not parse")
            continue
        model = getattr(args, "model", None)
        known = presets | PLACEHOLDER_FILES | {TRAINED_FILE}
        if isinstance(model, str) and model not in known:
            problems.append(f"{page}: `{line}` names {model!r}: no such preset")
        preset = getattr(args, "preset", None)
        if args.command == "train" and preset not in presets:
            problems.append(f"{page}: `{line}` trains an unknown preset {preset!r}")
    assert not problems, "\n".join(problems)


def test_every_shown_script_exists_and_takes_its_flags():
    problems = []
    for page, line, script, flags in python_scripts():
        path = ROOT / script
        if script == "train.py":  # the user's own script (docs/backends.md)
            continue
        if not path.is_file():
            problems.append(f"{page}: `{line}`: no {script}")
            continue
        source = path.read_text(encoding="utf-8")
        problems += [
            f"{page}: `{line}`: {script} defines no {flag}"
            for flag in flags
            if f'"{flag}"' not in source
        ]
    assert not problems, "\n".join(problems)


def _readme_commands():
    readme = ROOT / "README.md"
    return [
        (line, argv[1:])
        for line, argv in shell_commands(readme)
        if argv[0] == "keras-tfm" and len(argv) > 1 and argv[1] in RUN
    ]


def test_the_readmes_commands_run_in_order(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KERAS_TFM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(launcher, "quiet", lambda: None)  # this process's env
    (tmp_path / "kjv.txt").write_text(TEXT, encoding="utf-8")
    small = {
        "train": ["--data", "kjv.txt", "--epochs", "1", "--sequence-length", "48",
                  "--batch-size", "2", "--vocabulary-size", "256", "--no-samples",
                  "--no-jit", "--peak-flops", "1e12"],
        "evaluate": ["--data", "kjv.txt"],  # not the whole shipped Bible
        "kjv_gpt": ["--max-new-tokens", "4"],  # a preset: its defaults are its own
    }  # fmt: skip
    ran = []
    for line, shown in _readme_commands():
        argv = _argv(shown)
        argv += small.get(argv[0], []) + (small["kjv_gpt"] if "kjv_gpt" in argv else [])
        out = io.StringIO()
        try:
            with contextlib.redirect_stdout(out):
                cli.main(argv)
        except SystemExit as error:
            if error.code not in (0, None):
                pytest.fail(f"README: `{line}` exited with {error.code}")
        ran.append(argv[0])
        if argv[0] == "train":
            assert (tmp_path / TRAINED_FILE).is_file(), line
        if argv[0] == "generate":
            assert out.getvalue().strip(), f"README: `{line}` printed nothing"
    assert {"train", "generate", "evaluate", "presets", "classify"} <= set(ran)

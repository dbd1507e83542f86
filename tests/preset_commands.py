"""Runs every command line that `keras-tfm presets` prints, as printed,
with small limits, in one process: `run_all(folder)` (or `python -m
tests.preset_commands FOLDER`) prints one line per command, "ok <command>"
or "failed <command>: <error>", and returns the number that failed (the
command exits 1 if any did; tests/test_preset_commands.py).

The limits: a generated answer of 4 tokens; a training of one epoch of a
short text, 16-token sequences, a 256-token vocabulary, no samples and no
XLA, its file written in FOLDER. Only the smallest preset's `train` line
runs (`TRAINED`): the others are parsed and their preset found, since
gpt_small alone (124M parameters, a 1 GB file with its optimizer) would
take minutes; they run the same code.
"""

import contextlib
import io
import shlex
import sys
from pathlib import Path

from keras_tfm import launcher

# "..." in a printed command stands for the user's text.
TEXTS = {
    "generate": "In the beginning",
    "translator_de_en": "Ich habe einen Hund.",
    "translator_es_en": "Tengo un perro.",
    "classify": "Real programmers use vi.",
    "chat": "What is the capital of France?",
}
TRAINED = "gpt_tiny"
TEXT = "In the beginning God created the heaven and the earth. " * 40


def limits(argv, folder):
    """The flags that keep a command small."""
    if argv[0] in ("generate", "chat"):
        return ["--max-new-tokens", "4"]
    if argv[0] == "train":
        data = Path(folder) / "text.txt"
        data.write_text(TEXT, encoding="utf-8")
        return ["--data", str(data), "--epochs", "1", "--sequence-length", "16",
                "--batch-size", "2", "--vocabulary-size", "256", "--no-samples",
                "--no-jit", "--peak-flops", "1e12",
                "--output", str(Path(folder) / f"{argv[-1]}.keras")]  # fmt: skip
    return []


def printed_commands(main):
    """The command column of `keras-tfm presets`, as argv lists."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(["presets"])
    lines = [line for line in out.getvalue().splitlines() if "keras-tfm " in line]
    return [line[line.index("keras-tfm ") :] for line in lines]


def argv_of(command):
    argv = shlex.split(command)[1:]
    text = TEXTS.get(argv[1] if argv[0] == "generate" else argv[0], TEXTS["generate"])
    return [text if word == "..." else word for word in argv]


def run_all(folder):
    launcher.quiet()
    from keras_tfm import cli, zoo

    failed = 0
    for command in printed_commands(cli.main):
        argv = argv_of(command)
        try:
            if argv[0] == "train" and argv[-1] != TRAINED:
                cli.build_parser().parse_args(argv + limits(argv, folder))
                zoo.preset_dir(argv[-1])
                print(f"parsed {command}", flush=True)
                continue
            with contextlib.redirect_stdout(io.StringIO()):
                cli.main(argv + limits(argv, folder))
        except (Exception, SystemExit) as error:  # noqa: BLE001  (reported)
            failed += 1
            print(f"failed {command}: {type(error).__name__}: {error}", flush=True)
        else:
            print(f"ok {command}", flush=True)
    return failed


if __name__ == "__main__":
    sys.exit(1 if run_all(sys.argv[1]) else 0)

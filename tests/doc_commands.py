"""The shell commands that the README and the guides show, as argv lists.

`shell_commands(path)` reads each fenced block that is not Python, YAML or
JSON, joins lines continued by a backslash, splits `a && b` and `a; b`,
drops comments, a leading `$ ` and `VAR=value` assignments, and yields
`(line, argv)` for each command that starts with `keras-tfm` or `python`.
"""

import re
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = (
    ROOT / "README.md",
    ROOT / "examples" / "README.md",
    *sorted((ROOT / "docs").rglob("*.md")),
)
NOT_SHELL = {"python", "yaml", "yml", "json", "toml", "text", "jinja", "html"}
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.S | re.M)
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def shell_commands(path):
    """`(line, argv)` for each `keras-tfm` or `python` command of `path`."""
    for language, body in FENCE.findall(path.read_text(encoding="utf-8")):
        if language.lower() in NOT_SHELL:
            continue
        for line in body.replace("\\\n", " ").splitlines():
            line = line.strip().removeprefix("$ ")
            try:
                words = shlex.split(line, comments=True)
            except ValueError:  # not shell (an unclosed quote in prose)
                continue
            for argv in _split(words):
                while argv and ASSIGNMENT.match(argv[0]):
                    argv = argv[1:]
                if argv and argv[0] in ("keras-tfm", "python", "python3"):
                    yield line, argv


def _split(words):
    """`words` cut at `&&`, `||`, `;`, `|` and a trailing `&`."""
    command = []
    for word in words:
        if word in ("&&", "||", ";", "|", "&"):
            yield command
            command = []
        else:
            command.append(word.removesuffix(";"))
    yield command


def keras_tfm_commands():
    """`(page, line, argv after "keras-tfm")` over every page, in order."""
    for page in PAGES:
        for line, argv in shell_commands(page):
            if argv[0] == "keras-tfm" and len(argv) > 1:
                yield page.relative_to(ROOT), line, argv[1:]


def python_scripts():
    """`(page, line, script path, its --flags)` for each `python FILE.py`."""
    for page in PAGES:
        for line, argv in shell_commands(page):
            if len(argv) > 1 and argv[1].endswith(".py"):
                flags = [w.partition("=")[0] for w in argv[2:] if w.startswith("--")]
                yield page.relative_to(ROOT), line, argv[1], flags

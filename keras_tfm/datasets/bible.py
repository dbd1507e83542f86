"""The whole King James Bible, from Debian's `bible-kjv` package.

The package's `bible` command prints any range of verses; this module runs it
for Genesis 1:1 to Revelation 22:21 (31,102 verses, about 4.3 MB) and returns
the text one verse a line, without verse numbers or chapter headings. The
text is in the public domain. The same text ships inside keras-tfm (no
Debian package needed): `load_default_corpus`.
"""

import re
import shutil
import subprocess

WHOLE_BIBLE = "gen1:1-rev22:21"
_VERSE = re.compile(r"^\s+\d+ (.*)$")


def parse_bible_output(text):
    """The verses of the `bible` command's output, one per list item.

    Verse lines are indented and start with the verse number; a chapter
    starts with a heading such as "Genesis 1" between blank lines; long
    verses may continue on unindented lines.

    Example:
    >>> parse_bible_output("\\nGenesis 1\\n\\n  1 In the beginning\\ncontinued.\\n")
    ['In the beginning continued.']
    """
    verses, previous_blank = [], True
    for line in text.splitlines():
        if not line.strip():
            previous_blank = True
            continue
        match = _VERSE.match(line)
        if match:
            verses.append(match.group(1).strip())
        elif not previous_blank and verses:
            verses[-1] = f"{verses[-1]} {line.strip()}"  # a wrapped verse
        # else: a chapter heading, e.g. "Genesis 1"
        previous_blank = False
    return verses


def load_bible(verses=WHOLE_BIBLE, command="bible"):
    """The King James Version from the `bible-kjv` package, one verse a line.

    Args:
        verses: a verse range in the `bible` command's syntax, e.g.
            "gen1:1-rev22:21" (the default, the whole Bible) or "john3:16".
        command: the `bible` executable (name or path).

    Returns:
        The verses as one string, one verse a line (newline at the end).

    Raises:
        ValueError: if the command is missing (install the `bible-kjv`
            Debian package) or prints no verse for `verses`.

    Example:
    >>> text = load_bible("gen1:1-1:2")
    >>> text.splitlines()[0]
    'In the beginning God created the heaven and the earth.'
    """
    if not isinstance(verses, str) or not verses.strip():
        raise ValueError(
            f"`verses` must be a verse range such as 'gen1:1-rev22:21'. "
            f"Received: verses={verses!r}"
        )
    executable = shutil.which(command)
    if executable is None:
        raise ValueError(
            f"The `{command}` command is missing. Install the Debian package "
            f"`bible-kjv` (apt-get install -y bible-kjv). Received: command="
            f"{command!r}"
        )
    # A wide line width keeps each verse on one line (parsing handles both).
    result = subprocess.run(
        [executable, "-l100000", verses],
        capture_output=True,
        text=True,
        encoding="utf-8",
        check=False,
    )
    lines = parse_bible_output(result.stdout)
    if result.returncode != 0 or not lines:
        raise ValueError(
            f"`{command}` printed no verse for verses={verses!r} (exit code "
            f"{result.returncode}): {(result.stderr or result.stdout)[:200]!r}"
        )
    return "\n".join(lines) + "\n"

"""Writes the default corpus shipped in the package: KJV Genesis and Exodus.

The King James Version is in the public domain. It comes from Debian's
`bible-kjv` package (`apt-get install bible-kjv`), whose `bible` command prints
it; this script joins each verse onto one line, drops the verse numbers and
the chapter headings, and writes gzip-compressed UTF-8 text, one verse a line.

    python tools/make_default_corpus.py
"""

import gzip
import re
import subprocess
from pathlib import Path

OUTPUT = (
    Path(__file__).parents[1] / "keras_tfm/datasets/corpora/kjv_genesis_exodus.txt.gz"
)
VERSE_START = re.compile(r"^\s+\d+ ")


def verses(text):
    current = None
    for line in text.splitlines():
        if not line.strip() or re.match(r"^[1-3]?\s?[A-Z][a-z]+.* \d+$", line):
            continue  # blank lines and chapter headings such as "Genesis 1"
        if VERSE_START.match(line):
            if current:
                yield current
            current = VERSE_START.sub("", line).strip()
        else:
            current = f"{current} {line.strip()}"
    if current:
        yield current


def main():
    text = subprocess.run(
        ["bible", "gen1:1-exo40:38"], capture_output=True, text=True, check=True
    ).stdout
    lines = list(verses(text))
    OUTPUT.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(OUTPUT, "wt", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    print(f"{len(lines)} verses -> {OUTPUT} ({OUTPUT.stat().st_size} bytes)")


if __name__ == "__main__":
    main()

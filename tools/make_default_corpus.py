"""Writes the default corpus shipped in the package: the whole KJV.

Run once, on a machine with Debian's `bible-kjv` package installed
(`apt-get install -y bible-kjv`); the result is committed, so that
`pip install -e . && keras-tfm train` needs no Debian package. The King James
Version is in the public domain. `keras_tfm.datasets.load_bible` runs the
package's `bible` command from Genesis 1:1 to Revelation 22:21 and returns
each verse on one line, without verse numbers or chapter headings; this
script writes that text gzip-compressed (1.2 MB for 4.1 MB).

    python tools/make_default_corpus.py
"""

import gzip
from pathlib import Path

from keras_tfm.datasets.bible import load_bible

OUTPUT = Path(__file__).parents[1] / "keras_tfm/datasets/corpora/kjv.txt.gz"


def main():
    text = load_bible()
    OUTPUT.parent.mkdir(parents=True, exist_ok=True)
    # mtime=0: the same bytes every run, so a rebuild changes nothing in git.
    with open(OUTPUT, "wb") as raw, gzip.GzipFile(
        fileobj=raw, mode="wb", compresslevel=9, mtime=0
    ) as f:
        f.write(text.encode("utf-8"))
    lines = text.count("\n")
    print(f"{lines} verses -> {OUTPUT} ({OUTPUT.stat().st_size:,} bytes)")


if __name__ == "__main__":
    main()

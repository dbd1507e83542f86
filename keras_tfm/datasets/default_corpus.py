"""The default corpus: the King James Version of Genesis and Exodus.

Public-domain text shipped inside the package (about 360 kB, 2,746 verses, one
verse a line), so that `keras-tfm train` has real text to learn from on a
machine with no network. `tools/make_default_corpus.py` made it from Debian's
`bible-kjv` package.
"""

import gzip
from importlib import resources


def default_corpus_path():
    """The path of the gzip-compressed corpus inside the installed package."""
    return (
        resources.files("keras_tfm.datasets") / "corpora" / "kjv_genesis_exodus.txt.gz"
    )


def load_default_corpus():
    """The corpus as one string, one verse a line.

    Example:
    >>> text = load_default_corpus()
    >>> text.splitlines()[0]
    'In the beginning God created the heaven and the earth.'
    """
    with default_corpus_path().open("rb") as raw, gzip.open(raw, "rt", "utf-8") as f:
        return f.read()

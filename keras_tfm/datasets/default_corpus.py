"""The default corpus: the whole King James Version.

Public-domain text shipped inside the package (4.1 MB, 1.2 MB gzip-compressed,
31,102 verses, one verse a line, Genesis 1:1 to Revelation 22:21), so that
`keras-tfm train` has real text to learn from on a machine with no network
and no Debian package. `tools/make_default_corpus.py` made it from Debian's
`bible-kjv` package. Its first `GENESIS_EXODUS_VERSES` lines are Genesis and
Exodus, a small real text for quick runs and tests.
"""

import gzip
from importlib import resources

# Genesis has 1,533 verses and Exodus 1,213.
GENESIS_EXODUS_VERSES = 1533 + 1213


def default_corpus_path():
    """The path of the gzip-compressed corpus inside the installed package."""
    return resources.files("keras_tfm.datasets") / "corpora" / "kjv.txt.gz"


def load_default_corpus():
    """The corpus as one string, one verse a line.

    Example:
    >>> lines = load_default_corpus().splitlines()
    >>> lines[0]
    'In the beginning God created the heaven and the earth.'
    >>> lines[GENESIS_EXODUS_VERSES - 1][:40]  # Exodus 40:38
    'For the cloud of the LORD was upon the t'
    >>> lines[-1]
    'The grace of our Lord Jesus Christ be with you all. Amen.'
    """
    with default_corpus_path().open("rb") as raw, gzip.open(raw, "rt", "utf-8") as f:
        return f.read()

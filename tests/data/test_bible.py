"""The KJV loader: parsing the `bible` command's output, errors, the real text."""

import pytest

from keras_tfm.datasets import bible
from tests.conftest import requires_debian_package

OUTPUT = """
Genesis 1

  1 In the beginning God created the heaven and the earth.
  2 And the earth was without form, and void; and darkness was upon the face of
the deep.

Genesis 2

  1 Thus the heavens and the earth were finished.
"""


def test_parse_joins_wrapped_verses_and_drops_headings():
    assert bible.parse_bible_output(OUTPUT) == [
        "In the beginning God created the heaven and the earth.",
        "And the earth was without form, and void; and darkness was upon the "
        "face of the deep.",
        "Thus the heavens and the earth were finished.",
    ]


def test_missing_command_names_the_debian_package():
    with pytest.raises(ValueError, match="bible-kjv"):
        bible.load_bible(command="no-such-bible-command")
    with pytest.raises(ValueError, match="verses"):
        bible.load_bible(verses="")


@requires_debian_package("bible-kjv")
def test_real_verses_and_bad_range():
    text = bible.load_bible("gen1:1-1:3")
    assert text.splitlines() == [
        "In the beginning God created the heaven and the earth.",
        "And the earth was without form, and void; and darkness was upon the face "
        "of the deep. And the Spirit of God moved upon the face of the waters.",
        "And God said, Let there be light: and there was light.",
    ]
    with pytest.raises(ValueError, match="no verse"):
        bible.load_bible("notabook1:1")


@requires_debian_package("bible-kjv")
def test_the_whole_bible():
    lines = bible.load_bible().splitlines()
    assert len(lines) == 31_102  # verses from Genesis 1:1 to Revelation 22:21
    assert lines[-1] == "The grace of our Lord Jesus Christ be with you all. Amen."

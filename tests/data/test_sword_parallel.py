"""keras_tfm.datasets.sword_parallel: markup cleaning, alignment, book splits."""

import doctest

import pytest

from keras_tfm.datasets import sword_parallel
from keras_tfm.datasets.sword_parallel import (
    ParallelVerse,
    clean_verse,
    load_parallel_verses,
    split_parallel_verses,
)
from tests.conftest import requires_debian_package

needs_data = requires_debian_package("sword-text-sparv", "sword-text-web")


def test_a_footnote_goes_with_its_text_and_leaves_the_words_apart():
    markup = (
        '<q who="Jesus"><w lemma="strong:G3439">only</w> born</q><note '
        'placement="foot"><reference>3:16 </reference>The phrase “only born” '
        'is from the Greek.</note><q><w lemma="strong:G5207">Son</w>, that</q>'
    )
    assert clean_verse(markup) == "only born Son, that"


def test_added_words_paragraphs_and_entities_are_spaced_and_decoded():
    markup = (
        '<w>ejército</w><transChange type="added">se llamaba</transChange>'
        '<w>Sísara</w>, <div type="x-p"/>“<w>Ven</w> &amp; <w>mira</w> ”'
    )
    assert clean_verse(markup) == "ejército se llamaba Sísara, “Ven & mira”"


def test_whole_books_are_held_out_and_mismatched_training_pairs_dropped():
    verses = [
        ParallelVerse("Gen", 1, 1, "En el principio", "In the beginning"),
        # 21 words beside 3: verse boundaries that differ, not a translation.
        ParallelVerse("Num", 13, 2, "Y dijo: " + "x " * 19, "He said, “Send"),
        ParallelVerse("Jonah", 1, 1, "Y fué palabra", "Now Yahweh’s word"),
        ParallelVerse("Mic", 1, 1, "Palabra de Jehová", "Yahweh’s word"),
        ParallelVerse("1John", 5, 7, "Porque tres son " + "y " * 20, "For three"),
    ]
    train, validation, test = split_parallel_verses(verses)
    assert train == [("En el principio", "In the beginning")]
    assert validation == [("Palabra de Jehová", "Yahweh’s word")]
    # A held-out book stays whole, however long one side is.
    assert [es for es, _ in test] == ["Y fué palabra", verses[-1].spanish]


def test_split_refuses_what_is_not_a_parallel_verse():
    with pytest.raises(ValueError, match="Received: tuple"):
        split_parallel_verses([("Gen", 1, 1, "a", "b")])


def test_a_missing_module_names_the_package_to_install(tmp_path):
    with pytest.raises(ValueError, match="apt-get install -y sword-text-sparv"):
        load_parallel_verses(tmp_path)


@needs_data
def test_the_held_out_books_hold_449_test_and_367_validation_verses():
    books = sword_parallel.TEST_BOOKS + sword_parallel.VALIDATION_BOOKS
    verses = load_parallel_verses(books=books)
    _, validation, test = split_parallel_verses(verses)
    assert (len(test), len(validation)) == (449, 367)
    first = verses[0]
    assert (first.book, first.chapter, first.verse) == ("Ruth", 1, 1)
    assert first.english.startswith("In the days when the judges judged")
    assert first.spanish.startswith("Y ACONTECIÓ en los días")
    for verse in verses:  # no markup, no footnote glued to a word
        for text in (verse.spanish, verse.english):
            assert "<" not in text and ">" not in text and "  " not in text
    with pytest.raises(ValueError, match=r"Received: \['Jhn'\]"):
        load_parallel_verses(books=["Jhn"])


def test_docstring_examples():
    result = doctest.testmod(sword_parallel, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0

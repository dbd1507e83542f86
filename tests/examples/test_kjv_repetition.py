"""examples/kjv_repetition.py: the looping measure, on hand-counted texts."""

import doctest
from pathlib import Path

from tests.examples import load_example_module

PATH = Path(__file__).parents[2] / "examples" / "kjv_repetition.py"


def load_example():
    return load_example_module("kjv_repetition")


def test_repeated_ngram_share_counts_the_windows_seen_before():
    share = load_example().repeated_ngram_share
    # A line said three times: 9 windows of 4 words, the first 4 new, the
    # other 5 each equal to the window 4 words before.
    assert share("x y z w x y z w x y z w".split()) == 5 / 9
    # "the cat" x3 in 2-grams: (the cat) (cat the) (the cat) (cat the) (the cat).
    assert share("the cat the cat the cat".split(), n=2) == 3 / 5
    assert share("in the beginning God".split()) == 0.0  # one window, new
    assert share("too short".split()) == 0.0  # no window at all
    module = load_example()
    assert doctest.testmod(module).failed == 0

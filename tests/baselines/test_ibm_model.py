"""IBM Model 1 against a plain-loop EM in float64, and its translator."""

import doctest
import itertools

import numpy as np
import pytest

from keras_tfm.baselines import ibm_model as ibm_model1_module
from keras_tfm.baselines import ibm_model1, ibm_model1_translator

PAIRS = [
    ("la casa verde", "the green house"),
    ("la casa", "the house"),
    ("el libro", "the book"),
    ("un libro", "a book"),
    ("la flor", "the flower"),
]


def reference_model1(pairs, iterations):
    """Brown et al.'s EM, written out with dictionaries and loops."""
    sentences = [([""] + f.split(), e.split()) for f, e in pairs]
    t = {(f, e): 1.0 for fs, es in sentences for f, e in itertools.product(fs, es)}
    for _ in range(iterations):
        count, total = {}, {}
        for fs, es in sentences:
            for e in es:
                norm = sum(t[f, e] for f in fs)
                for f in fs:
                    c = t[f, e] / norm
                    count[f, e] = count.get((f, e), 0.0) + c
                    total[f] = total.get(f, 0.0) + c
        t = {(f, e): c / total[f] for (f, e), c in count.items()}
    return t


@pytest.mark.parametrize("iterations", [1, 3])
def test_probabilities_match_a_loop_reference(iterations):
    source, target, table = ibm_model1(PAIRS, iterations)
    expected = reference_model1(PAIRS, iterations)
    got = {(source[f], target[e]): p for (f, e), p in table.items()}
    assert got.keys() == expected.keys()
    np.testing.assert_allclose(
        [got[k] for k in expected], list(expected.values()), rtol=1e-12
    )
    # t(. | f) is a distribution for each source word.
    for f in set(source):
        assert sum(p for (s, _), p in got.items() if s == f) == pytest.approx(1.0)


def test_the_translator_uses_each_words_most_likely_translation():
    translate = ibm_model1_translator(PAIRS, iterations=10)
    assert translate("La casa verde.") == "The house green."
    assert translate(["un libro", "el pan"]) == ["A book", "The pan"]


@pytest.mark.parametrize("iterations", [0, 1.5])
def test_bad_iterations_and_empty_pairs_are_refused(iterations):
    with pytest.raises(ValueError, match="Received"):
        ibm_model1(PAIRS, iterations)
    with pytest.raises(ValueError, match=r"Received: pairs=\[\]"):
        ibm_model1([])


def test_docstring_examples():
    result = doctest.testmod(ibm_model1_module)
    assert result.attempted > 0 and result.failed == 0

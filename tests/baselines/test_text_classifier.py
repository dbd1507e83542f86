import doctest

import numpy as np
import pytest

from keras_tfm.baselines import text_classifier, tfidf_classifier


def test_word_pairs_tell_apart_what_single_words_cannot():
    # Both classes use the same words; only their order (bigrams) differs.
    texts = ["dog bites man", "man bites dog"] * 10
    labels = [0, 1] * 10
    classifier = tfidf_classifier(texts, labels)
    assert classifier.predict(["the dog bites man", "a man bites dog"]).tolist() == [
        0,
        1,
    ]


def test_words_seen_in_only_one_text_are_ignored():
    texts = ["alpha beta", "gamma delta", "alpha unique", "gamma delta"]
    classifier = tfidf_classifier(texts, [0, 1, 0, 1])
    # "unique" occurs once in training: the text scores like an empty one.
    np.testing.assert_allclose(
        classifier.predict_proba(["unique"]), classifier.predict_proba([""])
    )


def test_mismatched_lengths_are_refused():
    with pytest.raises(ValueError, match="same length"):
        tfidf_classifier(["a", "b"], [0])


def test_docstring_example():
    result = doctest.testmod(text_classifier)
    assert result.attempted > 0 and result.failed == 0

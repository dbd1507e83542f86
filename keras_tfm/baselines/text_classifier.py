"""TF-IDF + logistic regression: the classic text-classification baseline.

scikit-learn is imported when the baseline is fitted, not with keras_tfm:
importing it (and SciPy with it) cost every `keras-tfm` command ~1 CPU
second that only this function needs (benchmarks/cold_start.py).
"""


def tfidf_classifier(texts, labels, seed=0):
    """A fitted scikit-learn pipeline: word 1-2-gram TF-IDF, then logistic regression.

    Sublinear term frequencies, n-grams seen in at least two texts, and a
    weak L2 penalty (`C=10`): settings that suit short texts such as
    fortunes. Put its score beside a trained classifier's on the same split.

    Args:
        texts: the training texts (a list of strings).
        labels: one int class index per text.
        seed: the solver's random state.

    Returns:
        A fitted `sklearn.pipeline.Pipeline`; `predict(texts)` gives labels.

    Example:
    >>> texts = ["red apple", "green apple", "red car", "fast car"] * 5
    >>> classifier = tfidf_classifier(texts, [0, 0, 1, 1] * 5)
    >>> classifier.predict(["a ripe apple", "a red car"]).tolist()
    [0, 1]
    """
    if len(texts) != len(labels):
        raise ValueError(
            "`texts` and `labels` must have the same length. Received: "
            f"len(texts)={len(texts)}, len(labels)={len(labels)}"
        )
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    pipeline = make_pipeline(
        TfidfVectorizer(ngram_range=(1, 2), min_df=2, sublinear_tf=True),
        LogisticRegression(C=10.0, max_iter=2000, random_state=seed),
    )
    return pipeline.fit(list(texts), labels)

import numpy as np
import pytest

from keras_tfm.data.classification import classification_dataset
from keras_tfm.data.tokenizers import train_word_piece_tokenizer
from keras_tfm.datasets.fortunes import (
    fortune_definitions,
    fortune_sentences,
    fortune_splits,
    load_fortunes,
    read_fortune_file,
    split_sentences,
)
from tests.conftest import requires_debian_package

WORDS = "apple banana cherry dog eagle fig grape house island jungle".split()


def write_category(root, name, entries):
    (root / name).write_text("\n%\n".join(entries) + "\n%\n", encoding="utf-8")


@pytest.fixture
def fortune_root(tmp_path):
    """Three categories of 40 distinct entries plus every kind of noise."""
    for c, name in enumerate(["alpha", "beta", "gamma"]):
        entries = [
            f"{name} {WORDS[i % 10]} {WORDS[(i * 3 + c) % 10]} number {i}"
            for i in range(40)
        ]
        write_category(tmp_path, name, entries)
    # Noise in a fourth category that must not survive.
    write_category(
        tmp_path,
        "delta",
        [
            "  /\\_/\\\n ( o.o )\n  > ^ <  \n ||| ||| ###",  # ASCII art
            "word " * 300,  # too long
            "shared text in two categories",
            "delta only",
        ],
    )
    with open(tmp_path / "alpha", "a", encoding="utf-8") as f:
        f.write("shared text in two categories\n%\nB\bBo\bol\bld\bd text\n%\n")
        f.write("alpha 0 repeat\n%\nalpha 0 repeat\n%\n")
    (tmp_path / "alpha.dat").write_bytes(b"\x00\x01binary index")
    (tmp_path / "alpha.u8").write_text("not a category\n%\n")
    (tmp_path / "off").mkdir()
    write_category(tmp_path / "off", "rude", ["skipped"] * 50)
    return tmp_path


def test_missing_files_name_the_debian_package(tmp_path):
    with pytest.raises(ValueError, match="apt-get install -y fortunes"):
        load_fortunes(tmp_path)  # an empty folder
    with pytest.raises(ValueError, match="fortunes"):
        fortune_splits(tmp_path / "nowhere")


def test_reading_cleans_overstriking_and_whitespace(tmp_path):
    path = tmp_path / "x"
    path.write_text("B\bBo\bold\n  text\there\n%\n\n%\nsecond\n", encoding="utf-8")
    assert read_fortune_file(path) == ["Bold text here", "second"]


def test_filtering_rules(fortune_root):
    texts, labels, names = load_fortunes(fortune_root, min_entries=30)
    # delta (3 survivors < 30), off/, .dat and .u8 are gone.
    assert names == ["alpha", "beta", "gamma"]
    assert len(texts) == len(labels)
    alpha = [t for t, y in zip(texts, labels, strict=True) if y == 0]
    assert "Bold text" in alpha  # overstrike removed
    assert alpha.count("alpha 0 repeat") == 1  # repeat within a category
    assert "shared text in two categories" not in texts  # in two categories
    assert not any("o.o" in t or t.startswith("word word") for t in texts)
    assert np.bincount(labels).tolist() == [42, 40, 40]
    texts, _, names = load_fortunes(fortune_root, min_entries=2, max_chars=2000)
    assert "delta" in names and any(t.startswith("word word") for t in texts)


def test_bad_arguments(fortune_root):
    with pytest.raises(ValueError, match="categories"):
        load_fortunes(fortune_root, categories=["alpha", "nope"])
    with pytest.raises(ValueError, match="max_chars"):
        load_fortunes(fortune_root, max_chars=0)
    with pytest.raises(ValueError, match="min_entries"):
        load_fortunes(fortune_root, min_entries=1000)
    with pytest.raises(ValueError, match="test_fraction"):
        fortune_splits(fortune_root, test_fraction=0.7, min_entries=30)


def test_splits_are_deterministic_stratified_and_disjoint(fortune_root):
    a = fortune_splits(fortune_root, seed=3, min_entries=30)
    b = fortune_splits(fortune_root, seed=3, min_entries=30)
    c = fortune_splits(fortune_root, seed=4, min_entries=30)
    assert a["test"][0] == b["test"][0] and a["train"][0] == b["train"][0]
    assert a["test"][0] != c["test"][0]
    sets = [set(a[k][0]) for k in ("train", "validation", "test")]
    assert not (sets[0] & sets[1] or sets[0] & sets[2] or sets[1] & sets[2])
    assert sum(len(s) for s in sets) == 122
    # Stratified: each class has 4 or 5 test entries (10% of 40 to 42).
    assert set(np.bincount(a["test"][1]).tolist()) <= {4, 5}


def test_classification_dataset_buckets_and_keeps_pairs(fortune_root):
    splits = fortune_splits(fortune_root, min_entries=30)
    texts, labels = splits["train"]
    tokenizer = train_word_piece_tokenizer(texts, 80)
    dataset = classification_dataset(
        texts,
        labels,
        tokenizer,
        batch_size=4,
        max_sequence_length=16,
        bucket_lengths=[8, 16],
        shuffle=True,
    )
    seen = []
    batches = 0
    for x, y in dataset:
        batches += 1
        assert x.shape[1] in (8, 16) and x.dtype == "int32"
        for row, label in zip(np.asarray(x), np.asarray(y), strict=True):
            row = row[row != 0]
            assert row[0] == 2 and row[-1] == 3  # [CLS] ... [SEP]
            seen.append((tokenizer.detokenize(row[1:-1]), int(label)))
    assert batches == int(dataset.cardinality())
    expected = sorted(
        (tokenizer.detokenize(np.asarray(tokenizer(t))[:14]), int(y))
        for t, y in zip(texts, labels, strict=True)
    )
    # Every example once, with its own label (truncated to 14 + 2 tokens).
    assert sorted(seen) == expected


def test_split_sentences_cuts_the_attribution_and_keeps_whole_sentences():
    text = (
        'Man muss wissen, dass es geht. Ja! "So sei es," sagte er. ein Satz '
        "klein. Wer A sagt -- muss B sagen. -- Karl Valentin"
    )
    # Splits after . ! ? before a capital, or a quote and a capital; not
    # after "er." (a small letter follows), so '"So sei es," ... klein.' is
    # one piece, dropped as it does not start with a capital. The
    # attribution goes from the last " -- " on. "Ja!" has 1 word.
    assert split_sentences(text) == [
        "Man muss wissen, dass es geht.",
        "Wer A sagt -- muss B sagen.",
    ]
    assert split_sentences(text, min_words=1, max_words=3) == ["Ja!"]
    assert split_sentences("ok. This one is fine.") == ["This one is fine."]
    assert split_sentences("No end here", min_words=1) == []
    assert split_sentences("A ||| ### *** %%% ===.", min_words=1) == []


def test_split_sentences_bad_arguments():
    with pytest.raises(ValueError, match="Received: min_words=0"):
        split_sentences("A b c.", min_words=0)
    with pytest.raises(ValueError, match="Received: min_words=5, max_words=4"):
        split_sentences("A b c.", min_words=5, max_words=4)


def test_fortune_sentences_each_once_in_file_order(tmp_path):
    write_category(tmp_path, "b", ["Second file here. Three words here."])
    write_category(tmp_path, "a", ["Three words here. First one.", "Ok then."])
    (tmp_path / "a.u8").write_text("Not read at all.\n%\n")
    (tmp_path / "de").mkdir()
    write_category(tmp_path / "de", "x", ["Ein deutscher Satz."])
    assert fortune_sentences(tmp_path) == [
        "Three words here.",
        "Second file here.",
    ]
    assert fortune_sentences(tmp_path / "de") == ["Ein deutscher Satz."]
    with pytest.raises(ValueError, match="apt-get install -y fortunes"):
        fortune_sentences(tmp_path / "nowhere")


@requires_debian_package("fortunes")
def test_the_installed_corpus():
    texts, labels, names = load_fortunes()
    assert len(names) >= 20 and len(texts) > 10_000
    assert max(len(t) for t in texts) <= 800
    assert np.bincount(labels).min() >= 150


@requires_debian_package("fortunes")
def test_docstring_examples():
    import doctest

    import keras_tfm
    from keras_tfm.models import encoder_classifier

    result = doctest.testmod(
        encoder_classifier, extraglobs={"keras_tfm": keras_tfm, "np": np}
    )
    assert result.attempted > 0 and result.failed == 0


def test_definitions_are_term_and_text_once_each_without_author(tmp_path):
    write_category(
        tmp_path,
        "definitions",
        [
            "zeal, n.:\n\tQuality seen in new graduates.",
            "Cynic, n:\n\tOne who looks through rose-colored glasses with a\n"
            "\tjaundiced eye.\n\t\t-- Someone",
            "ZEAL, n.:\n\tA second entry for a term already read.",
            "Murphy's Law:\n\tNot a dictionary entry.",
            "long, adj.:\n\t" + "word " * 80,
        ],
    )
    assert fortune_definitions(tmp_path) == [
        ("zeal", "Quality seen in new graduates."),
        ("Cynic", "One who looks through rose-colored glasses with a jaundiced eye."),
    ]
    with pytest.raises(ValueError, match="no `definitions` file"):
        fortune_definitions(tmp_path / "alpha")

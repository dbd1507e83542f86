"""The recipe of `keras-tfm train` outside the CLI: its settings and splits."""

import bz2
import collections
import doctest
import math

import keras
import keras_hub
import numpy as np
import pytest

from keras_tfm import training
from keras_tfm.data import split_at_line, train_byte_pair_tokenizer
from keras_tfm.datasets import load_default_corpus
from keras_tfm.datasets.default_corpus import GENESIS_EXODUS_VERSES
from keras_tfm.training import language_model_recipe


@pytest.fixture
def restored_policy():
    policy = keras.config.dtype_policy()
    yield
    keras.config.set_dtype_policy(policy)


def test_the_docstring_examples(restored_policy):
    result = doctest.testmod(
        language_model_recipe,
        extraglobs={"keras": keras},
        optionflags=doctest.NORMALIZE_WHITESPACE,
    )
    assert result.attempted > 0 and result.failed == 0


def test_device_settings_given_or_the_device_defaults(restored_policy):
    given = language_model_recipe.use_device_settings(
        "mixed_bfloat16", jit_compile=True
    )
    assert given[:2] == ("mixed_bfloat16", True)
    assert keras.config.dtype_policy().name == "mixed_bfloat16"
    defaults = training.device_defaults()
    assert language_model_recipe.use_device_settings()[:2] == defaults[:2]
    assert language_model_recipe.use_device_settings().reason == defaults.reason


class ByteModel:  # a byte-level tokenizer is all the splits read
    tokenizer = keras_hub.tokenizers.ByteTokenizer(lowercase=False)


def test_splits_train_on_nine_blocks_in_ten_and_hold_out_the_tenth():
    # 100 lines of 10 bytes: 100 blocks of one line, every tenth held out.
    lines = [f"{i:03d}abcdef\n" for i in range(100)]
    text = "".join(lines)
    examples, validation, count = language_model_recipe.language_model_splits(
        ByteModel(), text, sequence_length=9, batch_size=4
    )
    train = "".join(line for i, line in enumerate(lines) if i % 10 != 9)
    held_out = "".join(line for i, line in enumerate(lines) if i % 10 == 9)
    assert count == 90
    windows = np.frombuffer(train.encode(), np.uint8).reshape(90, 10)
    pairs = list(examples.as_numpy_iterator())
    np.testing.assert_array_equal([x for x, _ in pairs], windows[:, :-1])
    np.testing.assert_array_equal([y for _, y in pairs], windows[:, 1:])
    held = [y for _, labels in validation.as_numpy_iterator() for y in labels]
    expected = np.frombuffer(held_out.encode(), np.uint8).reshape(10, 10)[:, 1:]
    np.testing.assert_array_equal(held, expected)


def eight_word_overlap(train, held_out):
    """The share of the held-out 8-word sequences that occur in `train`."""
    def grams(text):
        words = text.split()
        return [tuple(words[i : i + 8]) for i in range(len(words) - 7)]

    seen, held = set(grams(train)), grams(held_out)
    return sum(g in seen for g in held) / len(held)


def test_genesis_and_exodus_are_held_out_from_all_through_both_books():
    # The shipped KJV's first two books: the exodus tail problem in small.
    text = "".join(load_default_corpus().splitlines(True)[:GENESIS_EXODUS_VERSES])
    train, held_out = language_model_recipe.text_split(text)
    assert len(held_out) == pytest.approx(len(text) / 10, rel=0.05)
    # Ten runs of whole verses (about a chapter each), spread evenly.
    verses = text.splitlines()
    once = {v for v, n in collections.Counter(verses).items() if n == 1}
    held = set(held_out.splitlines()) & once
    positions = np.array([i for i, verse in enumerate(verses) if verse in held])
    starts = positions[np.r_[True, np.diff(positions) > 50]]
    assert len(starts) == 10
    assert np.all(np.diff(starts) > len(verses) / 20)
    assert "Pharaoh" in held_out and "Abraham" in held_out  # Exodus, Genesis
    # The tail of Exodus restates its middle (the tabernacle): the held-out
    # tenth shares half as many 8-word sequences with training as the tail.
    tail = split_at_line(text, 0.1)
    assert eight_word_overlap(train, held_out) < 0.6 * eight_word_overlap(*tail)


def test_comparison_converts_tokens_to_bytes_and_codes_the_same_bytes():
    text = load_default_corpus()[:30_000]
    train, held_out = language_model_recipe.text_split(text)
    tokenizer = train_byte_pair_tokenizer(
        train.splitlines(keepends=True), 400, name="tokenizer"
    )

    class Model:
        pass

    Model.tokenizer = tokenizer
    per_token, anchor = language_model_recipe.held_out_comparison(Model(), text, 15)
    ids = np.asarray(tokenizer(held_out))
    windows = ids[: 16 * (len(ids) // 16)].reshape(-1, 16)
    # Each label token's own bytes, summed: a byte-level BPE is lossless.
    label_bytes = sum(
        len(tokenizer.detokenize([[int(t)]])[0].encode()) for t in windows[:, 1:].flat
    )
    assert per_token == pytest.approx(label_bytes / windows[:, 1:].size)
    assert 2.0 < per_token < 4.0
    coded = held_out.encode()[: sum(
        len(tokenizer.detokenize([[int(t)]])[0].encode()) for t in windows.flat)]
    extra = len(bz2.compress(train.encode() + coded, 9)) - len(
        bz2.compress(train.encode(), 9))  # fmt: skip
    assert anchor == pytest.approx(extra * 8 * math.log(2) / len(coded))

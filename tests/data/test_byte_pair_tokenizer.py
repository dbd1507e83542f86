import numpy as np
import pytest

from keras_tfm.data import train_byte_pair_tokenizer

LINES = [
    "In the beginning God created the heaven and the earth.\n",
    "And the earth was without form, and void.\n",
    "And God said, Let there be light: and there was light.\n",
] * 20


@pytest.fixture(scope="module")
def tokenizer():
    return train_byte_pair_tokenizer(LINES, vocabulary_size=300)


def test_special_token_first_and_merges_learned(tokenizer):
    assert tokenizer.token_to_id("<|endoftext|>") == 0
    assert 257 < tokenizer.vocabulary_size() <= 300
    # Learned merges make the seen text shorter than its bytes.
    text = "".join(LINES[:3])
    assert len(np.asarray(tokenizer(text))) < 0.6 * len(text.encode())


@pytest.mark.parametrize(
    "text",
    [
        "And God said unto Moses\n\n  twice  spaced\ttabbed",
        "Zebras für Ärzte — naïve 😀 text never seen",
        " leading space and trailing newline\n",
    ],
)
def test_any_text_round_trips_exactly(tokenizer, text):
    ids = np.asarray(tokenizer(text))
    assert ids.min() > 0  # the special token never stands for text
    assert tokenizer.detokenize(ids) == text
    # Token by token, the pieces are the text's bytes (what nats/byte counts).
    pieces = [tokenizer.detokenize(ids[i : i + 1]) for i in range(len(ids))]
    if text.isascii():
        assert "".join(pieces) == text


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="vocabulary_size"):
        train_byte_pair_tokenizer(LINES, vocabulary_size=200)
    with pytest.raises(ValueError, match="list of strings"):
        train_byte_pair_tokenizer("one long string", vocabulary_size=300)
    with pytest.raises(ValueError, match="non-empty"):
        train_byte_pair_tokenizer(["", ""], vocabulary_size=300)

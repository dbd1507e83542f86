import re

import keras
import numpy as np
import pytest

import keras_tfm
from keras_tfm.data.tokenizers import (
    encode_for_classification,
    train_word_piece_tokenizer,
)

TEXTS = [
    "The cat sat on the mat.",
    "A dog sat on the log.",
    "Cats and dogs are friends, said the cat.",
] * 4


@pytest.fixture(scope="module")
def tokenizer():
    return train_word_piece_tokenizer(TEXTS, vocabulary_size=60)


def test_special_tokens_first_and_round_trip(tokenizer):
    vocabulary = tokenizer.get_vocabulary()
    assert vocabulary[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert 5 < tokenizer.vocabulary_size() <= 60
    assert tokenizer.detokenize(tokenizer("the cat sat")) == "the cat sat"
    # A word never seen splits into pieces or [UNK], never fails.
    assert len(np.asarray(tokenizer("zebra"))) >= 1


def test_encode_for_classification(tokenizer):
    ids = encode_for_classification(tokenizer, ["the cat", "the cat sat on the mat"], 6)
    assert ids.shape == (2, 6) and ids.dtype == np.int32
    pieces = np.asarray(tokenizer("the cat")).tolist()
    assert ids[0].tolist() == [2, *pieces, 3] + [0] * (4 - len(pieces))
    assert ids[1, 0] == 2 and ids[1, -1] == 3  # truncated, [SEP] kept
    rows = encode_for_classification(tokenizer, ["the cat"])
    assert rows[0].tolist() == [2, *pieces, 3]
    with pytest.raises(ValueError, match="sequence_length"):
        encode_for_classification(tokenizer, ["x"], 2)
    with pytest.raises(ValueError, match="texts"):
        encode_for_classification(tokenizer, "the cat")


def test_bad_arguments():
    with pytest.raises(ValueError, match="vocabulary_size"):
        train_word_piece_tokenizer(TEXTS, 5)
    with pytest.raises(ValueError, match="UNK"):
        train_word_piece_tokenizer(TEXTS, 50, reserved_tokens=("[PAD]",))
    with pytest.raises(ValueError, match="texts"):
        train_word_piece_tokenizer("one string", 50)
    with pytest.raises(ValueError, match="texts"):
        train_word_piece_tokenizer(["", "  "], 50)


def test_huggingface_learner_covers_its_text_in_word_pieces():
    texts = [*TEXTS, "El niño cantó una canción; ¿dónde está?"]
    tokenizer = train_word_piece_tokenizer(
        texts, 60, lowercase=False, strip_accents=False, learner="huggingface"
    )
    vocabulary = tokenizer.get_vocabulary()
    assert vocabulary[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert len(vocabulary) == len(set(vocabulary)) == tokenizer.vocabulary_size()
    assert tokenizer.vocabulary_size() <= 60
    assert "the" in vocabulary  # the most frequent word is one token
    for text in texts:
        for word in re.findall(r"\w+|[^\w\s]", text):  # punctuation apart
            pieces = [vocabulary[i] for i in np.asarray(tokenizer(word)).tolist()]
            # Word pieces: the first bare, the rest "##"-prefixed, joining to the word.
            assert all(p.startswith("##") for p in pieces[1:]), pieces
            assert pieces[0] + "".join(p[2:] for p in pieces[1:]) == word
    batched = train_word_piece_tokenizer(
        keras_tfm_dataset(texts), 60, False, False, learner="huggingface"
    )
    # The same tokens (the learner orders its alphabet by hash, not stably).
    assert sorted(batched.get_vocabulary()) == sorted(vocabulary)
    with pytest.raises(ValueError, match="Received: learner='bpe'"):
        train_word_piece_tokenizer(texts, 60, learner="bpe")


def keras_tfm_dataset(texts):
    import tensorflow as tf

    return tf.data.Dataset.from_tensor_slices(texts).batch(3)


def classifier_with(tokenizer):
    backbone = keras_tfm.models.EncoderBackbone(
        vocabulary_size=tokenizer.vocabulary_size(),
        num_layers=1,
        num_heads=2,
        hidden_dim=8,
        intermediate_dim=16,
        max_sequence_length=16,
        num_segments=0,
    )
    return keras_tfm.models.EncoderClassifier(
        backbone,
        num_classes=3,
        pooling="mean",
        preprocessor=keras_tfm.models.TextClassifierPreprocessor(tokenizer, 16),
    )


def test_tokenizer_travels_in_keras_file_and_preset(tokenizer, tmp_path):
    model = classifier_with(tokenizer)
    ids = encode_for_classification(tokenizer, ["the cat sat", "a dog"], 8)
    expected = np.asarray(model(ids))

    model.save(tmp_path / "m.keras")
    loaded = keras.saving.load_model(tmp_path / "m.keras")
    assert loaded.tokenizer.get_vocabulary() == tokenizer.get_vocabulary()
    np.testing.assert_allclose(np.asarray(loaded(ids)), expected, atol=1e-6)

    keras_tfm.zoo.save_preset(model, tmp_path / "zoo" / "tiny_cls", "d", "u", "t", "c")
    assert (tmp_path / "zoo/tiny_cls/assets").is_dir()
    restored = keras_tfm.zoo.from_preset("tiny_cls", root=tmp_path / "zoo")
    assert restored.tokenizer.get_vocabulary() == tokenizer.get_vocabulary()
    np.testing.assert_allclose(np.asarray(restored(ids)), expected, atol=1e-6)


def test_docstring_examples():
    import doctest

    from keras_tfm.data import tokenizers

    result = doctest.testmod(tokenizers)
    assert result.attempted > 0 and result.failed == 0

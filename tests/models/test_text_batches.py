"""TextBatches: strings' batches for `fit` on JAX and PyTorch, made in Python.

Run here on TensorFlow (the class is backend-agnostic: the preprocessor's
eager path and NumPy); tests/backends/jax_checks.py fits tasks through it
on JAX with TensorFlow blocked.
"""

import keras
import keras_hub
import numpy as np
import pytest

from keras_tfm import models
from keras_tfm.models.text_batches import TextBatches

WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "the", "cat", "sat", "a", "dog"]
TEXTS = ["the cat", "a dog sat", "the dog", "a cat", "cat sat"]


def classifier_preprocessor():
    tokenizer = keras_hub.tokenizers.WordPieceTokenizer(
        vocabulary=WORDS, special_tokens=WORDS[:4], oov_token="[UNK]"
    )
    return models.TextClassifierPreprocessor(tokenizer, sequence_length=5)


def packed(texts):
    """The ids of "[CLS] text [SEP]" padded to 5, by hand from WORDS."""
    rows = [[2, *(WORDS.index(w) for w in t.split()), 3] for t in texts]
    return np.array([row + [0] * (5 - len(row)) for row in rows])


def test_batches_are_the_preprocessed_slices_in_order():
    labels, weights = np.arange(5) % 3, np.linspace(0.5, 1, 5, dtype="float32")
    batches = TextBatches(classifier_preprocessor(), TEXTS, labels, weights, 2)
    assert len(batches) == 3  # 2 + 2 + 1
    for i, (x, y, w) in enumerate(batches[j] for j in range(len(batches))):
        rows = slice(2 * i, 2 * i + 2)
        np.testing.assert_array_equal(x["token_ids"], packed(TEXTS[rows]))
        np.testing.assert_array_equal(x["padding_mask"], packed(TEXTS[rows]) != 0)
        np.testing.assert_array_equal(y, labels[rows])
        np.testing.assert_array_equal(w, weights[rows])
    with pytest.raises(IndexError, match="index=3"):
        batches[3]


def test_shuffle_draws_a_new_order_of_the_texts_at_every_epoch():
    keras.utils.set_random_seed(0)
    batches = TextBatches(classifier_preprocessor(), TEXTS, np.arange(5), None,
                          batch_size=2, shuffle=True)  # fmt: skip
    orders = []
    for _ in range(3):
        batches.on_epoch_begin()
        epoch = [batches[i] for i in range(len(batches))]
        labels = np.concatenate([y for _, y in epoch])
        ids = np.concatenate([x["token_ids"] for x, _ in epoch])
        # Every text once, with its own label.
        assert sorted(labels) == [0, 1, 2, 3, 4]
        np.testing.assert_array_equal(ids, packed([TEXTS[i] for i in labels]))
        orders.append(labels.tolist())
    assert len({tuple(order) for order in orders}) > 1


def test_texts_only_give_inputs_only():
    (x,) = TextBatches(classifier_preprocessor(), TEXTS[:2])[0]
    np.testing.assert_array_equal(x["token_ids"], packed(TEXTS[:2]))


def test_bad_labels_and_lengths_say_what_was_received():
    with pytest.raises(ValueError, match="5 texts and y of length 4"):
        TextBatches(classifier_preprocessor(), TEXTS, np.arange(4))
    batches = TextBatches(classifier_preprocessor(), TEXTS, np.arange(5), None, 2,
                          label_limit=3)  # fmt: skip
    batches[0]  # labels 0 and 1: in range
    with pytest.raises(ValueError, match=r"class ids in \[0, 3\).*from 4 to 4"):
        batches[2]

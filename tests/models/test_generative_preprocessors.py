"""The generating families' preprocessors: strings to batches, in tf.data too."""

import keras
import keras_hub
import numpy as np
import pytest
import tensorflow as tf

from keras_tfm import models, training
from tests.builders import causal_lm, seq2seq_lm

WORDS = ["[PAD]", "[UNK]", "[START]", "[END]", "the", "cat", "sat", "a", "dog"]


def word_pieces():
    return keras_hub.tokenizers.WordPieceTokenizer(
        vocabulary=WORDS, special_tokens=WORDS[:4], oov_token="[UNK]"
    )


def test_causal_lm_preprocessor_shifts_text_plus_end_into_inputs_and_labels():
    preprocessor = models.CausalLMPreprocessor(word_pieces(), sequence_length=5)
    x, y, weight = preprocessor(["the cat sat", "a dog"])
    # Reference by hand: ids + [END], padded with 0 to 6, then shifted.
    rows = [[4, 5, 6, 3, 0, 0], [7, 8, 3, 0, 0, 0]]
    np.testing.assert_array_equal(x, [r[:-1] for r in rows])
    np.testing.assert_array_equal(y, [r[1:] for r in rows])
    np.testing.assert_array_equal(weight, [[r != 0 for r in row[1:]] for row in rows])


def test_preprocessors_run_inside_tf_data_as_they_run_eagerly():
    causal = models.CausalLMPreprocessor(word_pieces(), sequence_length=5)
    texts = ["the cat sat", "a dog", "the dog sat"]
    mapped = tf.data.Dataset.from_tensor_slices(texts).batch(3).map(causal)
    for got, expected in zip(next(iter(mapped)), causal(texts), strict=True):
        np.testing.assert_array_equal(got, expected)
    seq2seq = models.Seq2SeqLMPreprocessor(word_pieces(), 4, 4)
    pairs = tf.data.Dataset.from_tensor_slices((texts, texts[::-1])).batch(3)
    (x, labels, _), (x2, labels2, _) = (
        next(iter(pairs.map(seq2seq))),
        seq2seq(texts, texts[::-1]),
    )
    np.testing.assert_array_equal(x["target_ids"], x2["target_ids"])
    np.testing.assert_array_equal(labels, labels2)


def test_seq2seq_preprocessor_teacher_forces_from_the_start_token():
    preprocessor = models.Seq2SeqLMPreprocessor(word_pieces(), 4, 4)
    x, labels, weight = preprocessor(["the cat"], ["a dog"])
    np.testing.assert_array_equal(x["source_ids"], [[4, 5, 0, 0]])
    np.testing.assert_array_equal(x["target_ids"], [[2, 7, 8, 3]])
    np.testing.assert_array_equal(labels, [[7, 8, 3, 0]])
    np.testing.assert_array_equal(weight, [[1, 1, 1, 0]])


def test_a_causal_lm_fits_on_strings_in_one_line():
    keras.utils.set_random_seed(0)
    model = causal_lm(
        vocabulary_size=len(WORDS), num_layers=1, num_heads=2, hidden_dim=16,
        intermediate_dim=32, max_sequence_length=8, tokenizer=word_pieces(),
    )  # fmt: skip
    model.compile(keras.optimizers.Adam(1e-2), training.TokenCrossEntropy())
    # The same 16 steps in two epochs (each epoch costs a pass of set-up).
    history = model.fit(["the cat sat"] * 64, epochs=2, batch_size=8, verbose=0)
    losses = history.history["loss"]
    assert losses[-1] < 0.5 * losses[0], losses
    assert model.generate("the cat", max_new_tokens=2) == "the cat sat"


def test_a_seq2seq_lm_fits_on_string_pairs():
    keras.utils.set_random_seed(0)
    model = seq2seq_lm(
        vocabulary_size=len(WORDS), num_encoder_layers=1, num_decoder_layers=1,
        num_heads=2, hidden_dim=16, intermediate_dim=32, max_sequence_length=8,
        tokenizer=word_pieces(),
    )  # fmt: skip
    model.compile(keras.optimizers.Adam(1e-2), training.TokenCrossEntropy())
    # 24 steps in two epochs (each epoch costs a pass of set-up).
    history = model.fit(
        ["the cat"] * 48, ["a dog"] * 48, epochs=2, batch_size=4, verbose=0
    )
    assert history.history["loss"][-1] < 0.5 * history.history["loss"][0]
    assert model.generate("the cat", max_new_tokens=4) == "a dog"


def test_strings_without_a_preprocessor_say_so():
    model = causal_lm(
        vocabulary_size=9, num_layers=1, num_heads=2, hidden_dim=8,
        intermediate_dim=8, max_sequence_length=8,
    )  # fmt: skip
    model.compile("adam", training.TokenCrossEntropy())
    with pytest.raises(ValueError, match="no preprocessor"):
        model.fit(["the cat"], verbose=0)

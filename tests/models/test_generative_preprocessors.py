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
    preprocessor = models.CausalLMPreprocessor(
        word_pieces(), sequence_length=5, padding="max_length"
    )
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


def test_a_batch_is_padded_to_its_longest_row_rounded_to_a_power_of_two():
    preprocessor = models.CausalLMPreprocessor(word_pieces(), sequence_length=100)
    # Rows of 5, 3 and 2 ids with [END]: 4 inputs train every label; a
    # power of two >= 4 is 4, within the 100 positions.
    texts = ["the cat sat the", "a dog", "cat"]
    x, y, weight = preprocessor(texts)
    assert x.shape == (3, 4)
    full = models.CausalLMPreprocessor(
        word_pieces(), sequence_length=100, padding="max_length"
    )(texts)
    for short, long in zip((x, y, weight), full, strict=True):
        np.testing.assert_array_equal(short, np.asarray(long)[:, :4])
    assert np.asarray(full[2])[:, 4:].sum() == 0  # what is cut trains nothing
    # One more token needs 5 inputs: the next power of two, 8.
    assert preprocessor(["the cat sat the dog"])[0].shape == (1, 8)


def test_a_length_set_after_construction_is_what_packs():
    # `preprocessor.sequence_length = 64` was once stored and ignored.
    causal = models.CausalLMPreprocessor(word_pieces(), 8, padding="max_length")
    causal.sequence_length = 3
    assert causal(["the cat sat the dog"])[0].shape == (1, 3)
    restored = models.CausalLMPreprocessor.from_config(causal.get_config())
    assert restored.sequence_length == 3
    seq2seq = models.Seq2SeqLMPreprocessor(word_pieces(), 8, 8)
    seq2seq.encoder_sequence_length, seq2seq.decoder_sequence_length = 2, 3
    x, labels, _ = seq2seq(["the cat sat"], ["a dog sat the"])
    assert x["source_ids"].shape == (1, 2) and labels.shape == (1, 3)
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="sequence_length"):
            causal.sequence_length = bad
    assert causal.sequence_length == 3


def test_short_chats_on_smollm2_pack_to_their_length_not_its_context(smollm2):
    # The cause of fine-tuning SmolLM2 on four chat strings taking 20 GB:
    # every row padded to the preset's 8,192 positions.
    preprocessor = smollm2.preprocessor
    assert preprocessor.sequence_length == 8192
    chats = [
        smollm2.tokenizer.apply_chat_template(
            [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
        )
        for q, a in [("Hi!", "Hello."), ("What is 2+2?", "4."),
                     ("Name a colour.", "Blue."), ("Say yes.", "Yes.")]
    ]  # fmt: skip
    longest = max(len(smollm2.tokenizer(chat)) for chat in chats)
    data = smollm2._pipeline(chats, None, None, batch_size=4)[0]  # what fit reads
    x, _, _ = next(iter(data))
    needed = longest + (preprocessor.end_token_id is not None) - 1
    assert x.shape[1] == 2 ** int(np.ceil(np.log2(needed))) < 8192

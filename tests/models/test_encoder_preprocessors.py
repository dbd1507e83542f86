"""The encoder tasks' preprocessors: in tf.data, in the host helpers, saved.

Expected ids come from `encode_for_classification` (the NumPy packing the
tasks used before they had preprocessors) and from the vocabulary itself.
"""

import functools
from pathlib import Path

import keras
import keras_hub
import numpy as np
import pytest
import tensorflow as tf

import keras_tfm
from keras_tfm import saving
from keras_tfm.data import encode_for_classification
from keras_tfm.models import (
    EncoderBackbone,
    EncoderClassifier,
    MaskedLanguageModel,
    MaskedLMPreprocessor,
    SentenceEncoder,
    TextClassifierPreprocessor,
)

LEGACY = Path(__file__).resolve().parents[1] / "fixtures" / "legacy_encoders"
# What tools/make_legacy_encoder_fixtures.py computed with the old code.
LEGACY_TEXTS = ["the cat sat on the mat", "a dog ran", "the mat"]

WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS += ["the", "cat", "dog", "sat", "on", "mat", ".", "a", "ran"]
ID = {token: i for i, token in enumerate(WORDS)}
TEXTS = ["The cat sat on the mat.", "a dog ran", "the the the the the the the cat"]


def word_pieces():
    return keras_hub.tokenizers.WordPieceTokenizer(
        vocabulary=WORDS,
        special_tokens=["[PAD]", "[CLS]", "[SEP]", "[MASK]"],
        oov_token="[UNK]",
        lowercase=True,
    )


def backbone(max_sequence_length=8):
    return EncoderBackbone(
        vocabulary_size=len(WORDS), num_layers=1, num_heads=2, hidden_dim=8,
        intermediate_dim=16, max_sequence_length=max_sequence_length,
    )  # fmt: skip


def test_text_classifier_preprocessor_in_tf_data_gives_the_host_ids():
    preprocessor = TextClassifierPreprocessor(word_pieces(), sequence_length=8)
    labels = np.array([0, 1, 2])
    data = tf.data.Dataset.from_tensor_slices((TEXTS, labels)).batch(2)
    batches = list(data.map(preprocessor))
    ids = np.concatenate([x["token_ids"].numpy() for x, _ in batches])
    mask = np.concatenate([x["padding_mask"].numpy() for x, _ in batches])
    expected = encode_for_classification(preprocessor.tokenizer, TEXTS, 8)
    np.testing.assert_array_equal(ids, expected)
    np.testing.assert_array_equal(mask, expected != ID["[PAD]"])
    np.testing.assert_array_equal(np.concatenate([y for _, y in batches]), labels)
    # By hand: "a dog ran" is [CLS] a dog ran [SEP], padded.
    assert ids[1].tolist() == [2, ID["a"], ID["dog"], ID["ran"], 3, 0, 0, 0]
    # The last text is cut to 8 tokens, [SEP] kept last.
    assert ids[2, -1] == ID["[SEP]"] and mask[2].all()
    # The host path (classify, encode) packs the same ids, trimmed.
    host = preprocessor.pack_texts(TEXTS[1:2])
    np.testing.assert_array_equal(host["token_ids"], expected[1:2, :5])


def test_masked_lm_preprocessor_in_tf_data_masks_packed_text():
    preprocessor = MaskedLMPreprocessor(
        word_pieces(), sequence_length=8, mask_selection_rate=1.0,
        mask_selection_length=6, mask_token_rate=1.0, random_token_rate=0.0,
    )  # fmt: skip
    data = tf.data.Dataset.from_tensor_slices(TEXTS).batch(3).map(preprocessor)
    x, y, weights = next(iter(data))
    packed = encode_for_classification(preprocessor.tokenizer, TEXTS, 8)
    # Every real token but [CLS]/[SEP] is selected and becomes [MASK]; the
    # labels are the original ids at those positions.
    selectable = (packed != 0) & (packed != 2) & (packed != 3)
    np.testing.assert_array_equal(
        x["token_ids"].numpy(), np.where(selectable, ID["[MASK]"], packed)
    )
    for row in range(3):
        count = int(selectable[row].sum())
        positions = x["mask_positions"].numpy()[row, :count]
        np.testing.assert_array_equal(positions, np.flatnonzero(selectable[row]))
        np.testing.assert_array_equal(y.numpy()[row, :count], packed[row, positions])
        assert weights.numpy()[row].tolist() == [1.0] * count + [0.0] * (6 - count)
    ids, positions = preprocessor.encode_with_masks("the [MASK] sat.")
    assert ids.tolist() == [2, ID["the"], ID["[MASK]"], ID["sat"], ID["."], 3]
    assert positions.tolist() == [2]


def test_masked_lm_fit_on_strings_checks_and_trains():
    mlm = MaskedLanguageModel(
        backbone(), MaskedLMPreprocessor(word_pieces(), 8, mask_selection_length=4)
    )
    mlm.compile(
        "adam",
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        weighted_metrics=[],
    )
    history = mlm.fit(TEXTS * 4, batch_size=4, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])


def classifier():
    return EncoderClassifier(
        backbone(), num_classes=3, pooling="mean",
        preprocessor=TextClassifierPreprocessor(word_pieces(), 8),
        class_names=["x", "y", "z"],
    )  # fmt: skip


def sentence_encoder():
    tokenizer = keras_tfm.convert.HFBertTokenizer(WORDS, lowercase=True)
    return SentenceEncoder(backbone(), TextClassifierPreprocessor(tokenizer, 6))


def masked_lm():
    return MaskedLanguageModel(backbone(), MaskedLMPreprocessor(word_pieces(), 8))


def answers(model):
    if isinstance(model, EncoderClassifier):
        return np.asarray([[p for _, p in r] for r in model.classify(TEXTS, top_k=3)])
    if isinstance(model, SentenceEncoder):
        return model.encode(TEXTS)
    return np.asarray([c["probability"] for c in model.fill_mask("the [MASK]")])


@pytest.mark.parametrize("make", [classifier, sentence_encoder, masked_lm])
def test_config_round_trip_and_keras_file_keep_the_preprocessor(make, tmp_path):
    model = make()
    expected = answers(model)
    config = model.get_config()
    assert "tokenizer" not in config
    assert config["preprocessor"]["config"]["sequence_length"] in (6, 8)
    copy = type(model).from_config(config)
    assert type(copy.preprocessor) is type(model.preprocessor)
    assert copy.preprocessor.sequence_length == model.preprocessor.sequence_length
    saving.atomic_save(model, tmp_path / "m.keras")
    loaded = saving.load_model(tmp_path / "m.keras")
    assert loaded.tokenizer.get_vocabulary() == WORDS
    np.testing.assert_array_equal(answers(loaded), expected)


def test_old_keras_files_load_with_the_answers_of_the_old_code():
    # Within float32 rounding, not bit for bit: the answers were saved on one
    # CPU, and another's kernels (oneDNN with AMX, say) sum in another order.
    same = functools.partial(np.testing.assert_allclose, rtol=1e-6, atol=1e-7)
    with np.load(LEGACY / "expected.npz") as arrays:
        expected = dict(arrays)
    model = saving.load_model(LEGACY / "classifier.keras")
    assert isinstance(model.preprocessor, TextClassifierPreprocessor)
    ranked = model.classify(LEGACY_TEXTS, top_k=3)
    probabilities = [[dict(r)[n] for n in model.class_names] for r in ranked]
    same(probabilities, expected["classify"])
    same(
        model.predict(LEGACY_TEXTS, verbose=0), expected["predict"]
    )
    encoder = saving.load_model(LEGACY / "sentence_encoder.keras")
    assert encoder.max_sequence_length == 10  # the old max_sequence_length
    same(encoder.encode(LEGACY_TEXTS), expected["encode"])
    mlm = saving.load_model(LEGACY / "masked_lm.keras")
    filled = mlm.fill_mask("the [MASK] sat", top_k=5)
    same(
        [c["probability"] for c in filled], expected["fill_mask"]
    )


def test_from_preset_on_the_tasks_and_the_backbone():
    classifier = EncoderClassifier.from_preset("fortunes_classifier")
    assert classifier.classify("Real programmers use vi.") in classifier.class_names
    backbone = EncoderBackbone.from_preset("fortunes_classifier")
    assert isinstance(backbone, EncoderBackbone) and backbone.hidden_dim == 128
    with pytest.raises(ValueError, match="is a EncoderClassifier, not a Sentence"):
        SentenceEncoder.from_preset("fortunes_classifier")


def test_sentence_encoder_from_preset():
    try:
        minilm = SentenceEncoder.from_preset("all_minilm_l6_v2")
    except ValueError as error:
        if "pip install" in str(error):
            pytest.skip(str(error))
        raise
    assert minilm.max_sequence_length == 256
    assert minilm.encode([]).shape == (0, 384)


def test_tokenizer_argument_says_what_replaces_it():
    with pytest.raises(ValueError, match="preprocessor=TextClassifierPreprocessor"):
        EncoderClassifier(backbone(), 3, tokenizer=word_pieces())
    with pytest.raises(ValueError, match="preprocessor=MaskedLMPreprocessor"):
        MaskedLanguageModel(backbone(), tokenizer=word_pieces())


def test_a_preprocessor_longer_than_the_backbone_is_refused():
    with pytest.raises(ValueError, match="max_sequence_length=8"):
        EncoderClassifier(
            backbone(), 3, preprocessor=TextClassifierPreprocessor(word_pieces(), 9)
        )


@pytest.mark.parametrize("texts", [[12, 54, 99], None, 42, {"a": 1}])
def test_classify_and_encode_say_what_they_accept(texts):
    with pytest.raises(ValueError, match="a string or a list of strings. Received"):
        classifier().classify(texts)
    with pytest.raises(ValueError, match="a string or a list of strings. Received"):
        sentence_encoder().encode(texts)


def test_classify_of_no_texts_is_empty():
    assert classifier().classify([]) == []
    assert classifier().classify([], top_k=2) == []


def test_fit_maps_the_preprocessor_over_strings_only():
    model = classifier()
    model.compile("adam", "sparse_categorical_crossentropy")
    labels = np.array([0, 1, 2])
    strings = tf.data.Dataset.from_tensor_slices((TEXTS, labels)).batch(3)
    ids = strings.map(model.preprocessor)  # already token ids: used as they are
    from_strings = model.evaluate(strings, verbose=0)
    assert model.evaluate(ids, verbose=0) == from_strings
    with pytest.raises(ValueError, match=r"class ids in \[0, 3\)"):
        model.fit(strings.map(lambda x, y: (x, y + 1)), verbose=0)

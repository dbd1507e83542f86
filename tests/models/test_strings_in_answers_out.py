"""Raw strings in, answers out: every task model that holds a tokenizer.

The models are tiny and their answers are forced by injected weights or
logits, so the expected values come from the injection, not from training.
"""

import keras
import keras_hub
import numpy as np
import pytest
from keras import ops

import keras_tfm
from keras_tfm.models import (
    EncoderBackbone,
    EncoderClassifier,
    MaskedLanguageModel,
    MaskedLMPreprocessor,
    TextClassifierPreprocessor,
)
from tests import builders

WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[START]", "[END]"]
WORDS += ["the", "cat", "dog", "sat", "on", "mat", ".", "i", "'", "ve", "a", "##s"]
ID = {token: i for i, token in enumerate(WORDS)}


def word_pieces():
    return keras_hub.tokenizers.WordPieceTokenizer(
        vocabulary=WORDS,
        special_tokens=["[PAD]", "[CLS]", "[SEP]", "[MASK]", "[START]", "[END]"],
        oov_token="[UNK]",
        lowercase=True,
    )


def text_classifier_preprocessor():
    return TextClassifierPreprocessor(word_pieces(), sequence_length=16)


def backbone():
    return EncoderBackbone(
        vocabulary_size=len(WORDS),
        num_layers=1,
        num_heads=2,
        hidden_dim=16,
        intermediate_dim=32,
        max_sequence_length=16,
    )


def softmax64(logits):
    logits = np.asarray(logits, "float64")
    e = np.exp(logits - logits.max())
    return e / e.sum()


# Classification.

NAMES = ["animals", "furniture", "other"]
BIAS = np.array([0.5, 2.0, -1.0])  # forces "furniture", then "animals"


def forced_classifier():
    model = EncoderClassifier(
        backbone(),
        num_classes=3,
        preprocessor=text_classifier_preprocessor(),
        class_names=NAMES,
    )
    # A zero kernel makes the logits the bias, whatever the text.
    model.classifier.kernel.assign(np.zeros(model.classifier.kernel.shape))
    model.classifier.bias.assign(BIAS)
    return model


def test_classify_returns_the_name_of_the_forced_class():
    model = forced_classifier()
    assert model.classify("The cat sat.") == "furniture"
    assert model.classify(["The cat sat.", "a dog"]) == ["furniture"] * 2
    ranked = model.classify("the mat", top_k=2)
    expected = softmax64(BIAS)
    assert [name for name, _ in ranked] == ["furniture", "animals"]
    np.testing.assert_allclose([p for _, p in ranked], expected[[1, 0]], rtol=1e-6)


def test_predict_and_pool_take_strings_as_the_encoded_ids_do():
    model = EncoderClassifier(
        backbone(), num_classes=3, preprocessor=text_classifier_preprocessor()
    )
    texts = ["The cat sat on the mat.", "a dog"]
    ids = keras_tfm.data.encode_for_classification(model.tokenizer, texts, 16)
    np.testing.assert_array_equal(ids[1, :4], [ID["[CLS]"], ID["a"], ID["dog"], 3])
    expected = model.predict(ids, verbose=0)
    np.testing.assert_allclose(model.predict(texts, verbose=0), expected, atol=1e-6)
    pooled = ops.convert_to_numpy(model.pool(ids))
    from_texts = ops.convert_to_numpy(model.pool(texts))
    np.testing.assert_allclose(from_texts, pooled, atol=1e-5)
    # Without names, classify returns the class index of the largest logit.
    assert model.classify(texts) == expected.argmax(axis=1).tolist()


def test_class_names_are_in_the_config_and_survive_saving(tmp_path):
    model = forced_classifier()
    assert model.get_config()["class_names"] == NAMES
    path = str(tmp_path / "c.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    assert loaded.class_names == NAMES
    assert loaded.classify("the cat") == "furniture"


@pytest.mark.parametrize(
    "class_names",
    [["a", "b"], ["a", "a", "b"], "abc", ["a", "b", 3]],
)
def test_bad_class_names_raise(class_names):
    with pytest.raises(ValueError, match="class_names"):
        EncoderClassifier(backbone(), num_classes=3, class_names=class_names)


@pytest.mark.parametrize("top_k", [0, 4, 1.5, True])
def test_bad_top_k_raises(top_k):
    with pytest.raises(ValueError, match="top_k"):
        forced_classifier().classify("the cat", top_k=top_k)


# Fill-mask.


def forced_mlm(bias):
    model = MaskedLanguageModel(
        backbone(), preprocessor=MaskedLMPreprocessor(word_pieces(), 16)
    )
    head = model.mlm_head
    # Zero dense and LayerNorm: LayerNorm(GELU(0)) = beta = 0, so the logits
    # are the output bias at every masked position.
    for weight in (
        head._intermediate_dense.kernel,
        head._intermediate_dense.bias,
        head._intermediate_layer_norm.beta,
    ):
        weight.assign(np.zeros(weight.shape))
    head._bias.assign(bias)
    return model


def test_fill_mask_ranks_tokens_by_the_forced_logits():
    bias = np.zeros(len(WORDS))
    bias[ID["cat"]], bias[ID["dog"]], bias[ID["mat"]] = 3.0, 2.0, 1.0
    bias[ID["[PAD]"]] = 5.0  # a special token is never a candidate
    model = forced_mlm(bias)
    candidates = model.fill_mask("The [MASK] sat on the mat.", top_k=3)
    expected = softmax64(bias)
    assert [c["token"] for c in candidates] == ["cat", "dog", "mat"]
    assert [c["token_id"] for c in candidates] == [ID["cat"], ID["dog"], ID["mat"]]
    np.testing.assert_allclose(
        [c["probability"] for c in candidates],
        expected[[ID["cat"], ID["dog"], ID["mat"]]],
        rtol=1e-6,
    )
    assert candidates[0]["text"] == "the cat sat on the mat."


def test_fill_mask_answers_each_mask_and_each_text():
    bias = np.zeros(len(WORDS))
    bias[ID["dog"]] = 4.0
    model = forced_mlm(bias)
    two = model.fill_mask("[MASK] cat [MASK]", top_k=1)
    assert len(two) == 2
    assert two[0][0]["text"] == "dog cat [MASK]"
    assert two[1][0]["text"] == "[MASK] cat dog"
    batch = model.fill_mask(["the [MASK]", "a [MASK] sat"], top_k=2)
    assert [len(row) for row in batch] == [2, 2]
    assert batch[1][0]["text"] == "a dog sat"


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda m: m.fill_mask("no mask here"), r"\[MASK\]"),
        (lambda m: m.fill_mask("the [MASK]", top_k=0), "top_k"),
        (lambda m: m.fill_mask("the " * 20 + "[MASK]"), "sequence_length=16"),
    ],
)
def test_fill_mask_bad_input_raises(call, match):
    with pytest.raises(ValueError, match=match):
        call(forced_mlm(np.zeros(len(WORDS))))


def test_masked_language_model_keeps_its_tokenizer_when_saved(tmp_path):
    model = forced_mlm(np.arange(len(WORDS), dtype="float32"))
    path = str(tmp_path / "m.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    assert loaded.fill_mask("the [MASK]") == model.fill_mask("the [MASK]")


# Translation.


def seq2seq(tokenizer="word_pieces", **kwargs):
    return builders.seq2seq_lm(
        vocabulary_size=len(WORDS),
        num_encoder_layers=1,
        num_decoder_layers=1,
        num_heads=2,
        hidden_dim=16,
        intermediate_dim=32,
        max_sequence_length=16,
        tokenizer=word_pieces() if tokenizer == "word_pieces" else tokenizer,
        **kwargs,
    )


def force_logit(model, token_id):
    """Adds 1e4 to one token's logit at every step: it always wins."""
    logits = model.logits
    bonus = ops.one_hot(token_id, model.vocabulary_size) * 1e4
    model.logits = lambda x: logits(x) + bonus


def test_seq2seq_takes_start_and_stop_from_the_tokenizer():
    model = seq2seq()
    force_logit(model, ID["[END]"])
    # [END] is the tokenizer's stop token: generation ends at once.
    assert model.generate([[ID["cat"]]], max_new_tokens=5) == [[ID["[END]"]]]
    # An empty list overrides it: no stop token, all five steps run.
    assert model.generate([[ID["cat"]]], 5, stop_token_ids=[]) == [[ID["[END]"]] * 5]
    assert model.generate("the cat", max_new_tokens=5) == ""


def test_seq2seq_strings_are_the_detokenized_ids_without_special_tokens():
    model = seq2seq()
    force_logit(model, ID["ve"])
    texts = model.generate(["the cat", "a dog sat"], max_new_tokens=3)
    assert texts == ["ve ve ve"] * 2
    model = seq2seq()
    rng = np.random.default_rng(0)
    for weight in model.weights:
        weight.assign(rng.normal(0, 0.5, weight.shape))
    source = "the cat sat on the mat."
    ids = model.generate(
        [[ID[w] for w in ["the", "cat", "sat", "on", "the", "mat", "."]]],
        max_new_tokens=8,
        stop_token_ids=ID["[END]"],
    )[0]
    text = model.generate(source, max_new_tokens=8)
    assert text == keras_tfm.data.detokenize(model.tokenizer, ids)
    for special in ("[START]", "[END]", "[PAD]"):
        assert special not in text


def test_generated_strings_join_word_pieces_and_apostrophes():
    from keras_tfm.generation import outputs

    model = seq2seq()
    row = [ID[t] for t in ["i", "'", "ve", "a", "dog", ".", "[END]"]]
    assert outputs.format_outputs([row], "string", model.tokenizer, (ID["[END]"],)) == (
        "i've a dog."
    )


def test_seq2seq_without_a_start_token_says_how_to_give_one():
    model = builders.seq2seq_lm(
        vocabulary_size=260,
        num_encoder_layers=1,
        num_decoder_layers=1,
        num_heads=2,
        hidden_dim=16,
        intermediate_dim=32,
        max_sequence_length=16,
        tokenizer=keras_hub.tokenizers.ByteTokenizer(),
    )
    with pytest.raises(ValueError, match="start_token_id"):
        model.generate("hallo", max_new_tokens=2)
    given = keras_tfm.models.Seq2SeqLM(
        model.backbone, model.preprocessor, start_token_id=1
    )
    assert isinstance(given.generate("hallo", 2), str)


# Causal language models.


def causal_lm(tokenizer, vocabulary_size):
    return builders.causal_lm(
        vocabulary_size=vocabulary_size,
        num_layers=1,
        num_heads=2,
        hidden_dim=16,
        intermediate_dim=32,
        max_sequence_length=32,
        tokenizer=tokenizer,
    )


def test_causal_lm_stops_at_the_tokenizers_end_token():
    model = causal_lm(word_pieces(), len(WORDS))
    force_logit(model, ID["[END]"])
    prompt = [ID["the"], ID["cat"]]
    assert model.generate(prompt, max_new_tokens=4) == [*prompt, ID["[END]"]]
    assert model.generate(prompt, 4, stop_token_ids=[]) == prompt + [ID["[END]"]] * 4
    assert model.generate("The cat", max_new_tokens=4) == "the cat"


def test_causal_lm_string_output_starts_with_the_prompt():
    model = causal_lm(keras_hub.tokenizers.ByteTokenizer(lowercase=False), 256)
    force_logit(model, ord("!"))
    assert model.generate("In the beginning", max_new_tokens=3) == (
        "In the beginning!!!"
    )


# Strings given to a model without a tokenizer.


@pytest.mark.parametrize(
    "call",
    [
        lambda: EncoderClassifier(backbone(), 3).predict(["the cat"]),
        lambda: EncoderClassifier(backbone(), 3).classify("the cat"),
        lambda: MaskedLanguageModel(backbone()).fill_mask("the [MASK]"),
        lambda: seq2seq(tokenizer=None, start_token_id=5).generate("the cat", 2),
        lambda: causal_lm(None, 20).generate("the cat", 2),
    ],
)
def test_strings_without_a_tokenizer_raise_naming_the_fix(call):
    with pytest.raises(ValueError, match="tokenizer|preprocessor"):
        call()

"""int8 quantization of every model family: accuracy, save/load, generate.

Tolerance: Keras's int8 path rounds each weight channel to 1/254 of its
largest magnitude and each token's activations the same way before every
matmul; through the few layers of these tiny models that keeps the logits
within 3% of the largest float logit (measured: about 1-1.5%), while a
dropped scale or a lost embedding scaling changes them by 100% or more.
"""

import doctest
import warnings

import keras
import keras_hub
import numpy as np
import pytest

import keras_tfm
from keras_tfm import zoo
from keras_tfm.layers import TokenEmbedding
from keras_tfm.models import (
    EncoderBackbone,
    EncoderClassifier,
    MaskedLanguageModel,
)
from keras_tfm.models.quantization import QuantizationMixin
from tests.builders import causal_lm, seq2seq_lm

RELATIVE_TOLERANCE = 0.03

SMALL = dict(num_heads=2, hidden_dim=32, intermediate_dim=64, max_sequence_length=16)


def assert_close_to_float(quantized, reference):
    quantized, reference = np.asarray(quantized), np.asarray(reference)
    error = np.max(np.abs(quantized - reference))
    assert error <= RELATIVE_TOLERANCE * np.max(np.abs(reference)), error
    assert error > 0  # something really was quantized


def weight_dtypes(model):
    return {w.path: str(w.dtype) for w in model.weights}


def assert_all_matrices_int8(model):
    dtypes = weight_dtypes(model)
    matrices = [w.path for w in model.weights if len(w.shape) == 2]
    floats = [
        p for p in matrices if dtypes[p] != "int8" and "position_embedding" not in p
    ]
    assert not floats, floats


def save_and_load(model, tmp_path):
    path = tmp_path / "model.keras"
    model.save(path)
    return keras.models.load_model(path)


@pytest.mark.parametrize("scale", [False, True])
def test_token_embedding_quantizes_forward_reverse_and_mask(scale):
    embedding = TokenEmbedding(60, 16, mask_zero=True, scale_embeddings=scale)
    ids = np.array([[3, 4, 0, 9]])
    hidden = embedding(ids)
    logits = embedding(hidden, reverse=True)
    embedding.quantize("int8")
    assert embedding.quantization_mode == "int8"
    assert weight_dtypes(embedding)[embedding.weights[0].path] == "int8"
    quantized_hidden = embedding(ids)
    assert_close_to_float(quantized_hidden, hidden)  # the sqrt(d) scale kept
    assert_close_to_float(embedding(hidden, reverse=True), logits)
    np.testing.assert_array_equal(quantized_hidden._keras_mask, [[1, 1, 0, 1]])
    with pytest.raises(ValueError, match="integer token ids"):
        embedding(np.zeros((1, 2), "float32"))


def test_causal_lm_int8_close_save_load_and_generate(tmp_path):
    model = causal_lm(vocabulary_size=50, num_layers=2, **SMALL)
    x = np.array([[5, 6, 7, 8, 9, 10]])
    reference = model(x)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.quantize("int8")
    assert not [w for w in caught if "quantize" in str(w.message)]
    assert_all_matrices_int8(model)
    quantized = model(x)
    assert_close_to_float(quantized, reference)
    assert model.get_config()["quantization_mode"] == "int8"
    # Greedy decoding of a random tiny model may flip on near ties, so it is
    # not compared with float's; it must equal itself after a reload.
    quantized_greedy = model.generate([[5, 6, 7]], max_new_tokens=6)
    assert len(quantized_greedy[0]) == 9
    restored = save_and_load(model, tmp_path)
    assert weight_dtypes(restored) == weight_dtypes(model)
    np.testing.assert_array_equal(restored(x), quantized)
    assert restored.generate([[5, 6, 7]], max_new_tokens=6) == quantized_greedy


def test_seq2seq_int8_close_save_load_and_generate(tmp_path):
    model = seq2seq_lm(
        vocabulary_size=40, num_encoder_layers=1, num_decoder_layers=1,
        start_token_id=1, **SMALL,
    )  # fmt: skip
    inputs = {"source_ids": np.array([[3, 4, 5, 0]]), "target_ids": np.array([[1, 6]])}
    reference = model(inputs)
    model.quantize("int8")
    assert_all_matrices_int8(model)
    quantized = model(inputs)
    assert_close_to_float(quantized, reference)
    output = model.generate([[3, 4, 5]], max_new_tokens=5)
    restored = save_and_load(model, tmp_path)
    np.testing.assert_array_equal(restored(inputs), quantized)
    assert restored.generate([[3, 4, 5]], max_new_tokens=5) == output


def backbone():
    return EncoderBackbone(vocabulary_size=50, num_layers=1, **SMALL)


@pytest.mark.parametrize("family", ["classifier", "mlm", "backbone"])
def test_encoder_family_int8_close_and_save_load(family, tmp_path):
    token_ids = np.array([[2, 5, 7, 9, 0, 0]])
    if family == "classifier":
        model, inputs = EncoderClassifier(backbone(), num_classes=3), token_ids
    elif family == "mlm":
        model = MaskedLanguageModel(backbone())
        inputs = {"token_ids": token_ids, "mask_positions": np.array([[1, 3]])}
    else:
        model, inputs = backbone(), token_ids
    reference = model(inputs)
    model.quantize("int8")
    assert_all_matrices_int8(model)
    quantized = model(inputs)
    assert_close_to_float(quantized, reference)
    restored = save_and_load(model, tmp_path)
    assert weight_dtypes(restored) == weight_dtypes(model)
    np.testing.assert_array_equal(restored(inputs), quantized)


def test_quantized_backbone_inside_a_classifier_round_trips(tmp_path):
    encoder = backbone()
    encoder.quantize("int8")  # the backbone first, then the head on top
    model = EncoderClassifier(encoder, num_classes=2)
    model.quantize("int8")
    inputs = np.array([[2, 5, 7, 0]])
    restored = save_and_load(model, tmp_path)
    np.testing.assert_array_equal(restored(inputs), model(inputs))


def test_preset_of_int8_weights_round_trips(tmp_path):
    tokenizer = keras_hub.tokenizers.ByteTokenizer()  # a layer, never quantized
    model = causal_lm(vocabulary_size=256, num_layers=1, tokenizer=tokenizer, **SMALL)
    model.quantize("int8")
    zoo.save_preset(
        model,
        tmp_path / "gpt_int8",
        description="A tiny int8 GPT.",
        intended_use="Tests.",
        training_data="None (random weights).",
        training_command="None.",
    )
    restored = zoo.from_preset("gpt_int8", root=tmp_path)
    x = np.array([[5, 6, 7]])
    np.testing.assert_array_equal(restored(x), model(x))
    assert weight_dtypes(restored) == weight_dtypes(model)
    assert isinstance(restored.generate("ab", max_new_tokens=3), str)


class Bilinear(keras.layers.Layer):
    """A weight matrix that Keras does not know how to quantize."""

    def build(self, input_shape):
        self.kernel = self.add_weight(shape=(input_shape[-1], input_shape[-1]))

    def call(self, inputs):
        return inputs @ self.kernel


class Toy(QuantizationMixin, keras.Model):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.dense = keras.layers.Dense(4, name="dense")
        self.bilinear = Bilinear(name="my_bilinear")
        self.dense.build((None, 4))
        self.bilinear.build((None, 4))
        self.built = True

    def call(self, inputs):
        return self.bilinear(self.dense(inputs))


def test_unquantizable_layer_is_named_and_nothing_changes():
    model = Toy()
    with pytest.raises(ValueError, match="my_bilinear.*Bilinear"):
        model.quantize("int8")
    assert model.dense.quantization_mode is None  # checked before any change
    with pytest.raises(ValueError, match="mode=int3"):
        causal_lm(vocabulary_size=50, num_layers=1, **SMALL).quantize("int3")


def test_docstring_example():
    from keras_tfm.models import quantization as module

    result = doctest.testmod(
        module, extraglobs={"np": np, "keras": keras, "keras_tfm": keras_tfm}
    )
    assert result.attempted > 0 and result.failed == 0


# Weight-only int8 (int8 weights, float activations) on a converted Llama.
#
# Drift: each weight is rounded to 1/254 of its output channel's largest
# magnitude, so one matmul's output moves by at most sum_i |x_i| max_i |w_ij|
# / 254 (checked exactly on the logits layer below). Through the fixture's two
# blocks the logits stayed within 4.1% (tied fixture) and 7.0% (GQA fixture)
# of the largest float logit, measured: WEIGHT_ONLY_DRIFT leaves room above
# that; a dropped or doubled scale moves them by 50% or more.
WEIGHT_ONLY_DRIFT = 0.1


def assert_weight_only(model):
    quantized = [x for x in model._flatten_layers() if x.quantization_mode]
    assert quantized and all(x.inputs_quantizer is None for x in quantized)


def tiny_llama(name="llama_tied"):
    from keras_tfm.convert import load_hf_llama

    from ..convert.decoder_checks import FIXTURES

    return load_hf_llama(FIXTURES / f"tiny_{name}_hf")


@pytest.mark.parametrize("name", ["llama_tied", "llama_gqa"])
def test_int8_weight_only_logits_close_and_no_activation_quantizer(name):
    model = tiny_llama(name)
    x = np.random.default_rng(0).integers(3, model.vocabulary_size, (2, 12))
    reference = np.asarray(model(x))
    model.quantize("int8", config=keras_tfm.models.int8_weight_only_config())
    assert model.quantized_to == "int8_weight_only"
    assert_all_matrices_int8(model)
    assert_weight_only(model)
    error = np.max(np.abs(np.asarray(model(x)) - reference))
    assert 0 < error <= WEIGHT_ONLY_DRIFT * np.max(np.abs(reference))


def test_int8_weight_only_logits_layer_within_the_rounding_bound():
    model = tiny_llama()
    table = np.asarray(model.backbone.token_embedding.embeddings, "float64")  # (V, D)
    hidden = np.random.default_rng(1).normal(size=(3, 1, table.shape[1]))
    reference = hidden @ table.T
    model.quantize("int8", config=keras_tfm.models.int8_weight_only_config())
    logits = np.asarray(
        model.backbone.token_embedding(hidden.astype("float32"), reverse=True)
    )
    # Per token row: |w - dequantized w| <= max|row| / 254.
    bound = np.abs(hidden).sum(-1, keepdims=True) * np.abs(table).max(axis=1) / 254
    error = np.abs(logits - reference)
    assert np.all(error <= bound + 1e-5)
    assert error.max() > 0.05 * bound.max()  # it is rounding, not float


def test_int8_weight_only_greedy_equal_on_the_fixture():
    model = tiny_llama()
    prompts = [[5, 17, 42, 9], [100, 7]]
    expected = model.generate(prompts, max_new_tokens=10)
    model.quantize("int8", config=keras_tfm.models.int8_weight_only_config())
    assert model.generate(prompts, max_new_tokens=10) == expected


def test_int8_weight_only_save_load_exact_and_file_smaller(tmp_path):
    model = tiny_llama()
    float_path = tmp_path / "float.keras"
    model.save(float_path)
    float_bytes = sum(w.numpy().nbytes for w in model.weights)
    model.quantize("int8", config=keras_tfm.models.int8_weight_only_config())
    int8_bytes = sum(w.numpy().nbytes for w in model.weights)
    x = np.array([[5, 17, 42, 9, 3]])
    logits = np.asarray(model(x))
    restored = save_and_load(model, tmp_path)
    assert restored.quantized_to == "int8_weight_only"
    assert_weight_only(restored)
    assert weight_dtypes(restored) == weight_dtypes(model)
    np.testing.assert_array_equal(np.asarray(restored(x)), logits)
    # The file shrinks by the weights' bytes saved (a 4-byte float becomes a
    # 1-byte int8 plus one 4-byte scale per channel), beyond a fixed overhead.
    saved = float_path.stat().st_size - (tmp_path / "model.keras").stat().st_size
    assert saved >= 0.9 * (float_bytes - int8_bytes)

import math

import keras
import numpy as np
import pytest

from keras_tfm.models import EncoderBackbone, EncoderClassifier, MaskedLanguageModel
from tests.mixed_precision import assert_close_to_float32

SEQ = 12


def make_backbone(**overrides):
    config = dict(
        vocabulary_size=20,
        num_layers=1,
        num_heads=2,
        hidden_dim=16,
        intermediate_dim=32,
        max_sequence_length=SEQ,
    )
    return EncoderBackbone(**{**config, **overrides})


def randomize(model, seed=0, scale=0.3):
    rng = np.random.default_rng(seed)
    for weight in model.weights:
        weight.assign(rng.normal(0, scale, weight.shape).astype("float32"))


def contains_seven(n, seed):
    """[CLS]=1 then 3-11 random ids in 4..19, padded with 0; label: is 7 there."""
    rng = np.random.default_rng(seed)
    ids = np.zeros((n, SEQ), "int32")
    labels = rng.integers(0, 2, n)
    others = [t for t in range(4, 20) if t != 7]
    for i in range(n):
        length = rng.integers(4, SEQ + 1)
        row = rng.choice(others, length)
        row[0] = 1
        if labels[i]:
            row[rng.integers(1, length)] = 7
        ids[i, :length] = row
    return ids, labels


def padded_batch():
    ids, _ = contains_seven(6, seed=3)
    return ids


@pytest.mark.parametrize("pooling, jit_compile", [("cls", False), ("mean", True)])
def test_learns_whether_a_token_is_present(pooling, jit_compile):
    x, y = contains_seven(1024, seed=0)
    x_test, y_test = contains_seven(256, seed=1)
    model = EncoderClassifier(make_backbone(), num_classes=2, pooling=pooling)
    model.compile(
        keras.optimizers.Adam(3e-3),
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
        jit_compile=jit_compile,
    )
    # Learned by the second epoch (test loss 0.15 and 0.07 of the bound
    # below, accuracy 1.0); the third leaves a margin (0.05 and 0.03).
    model.fit(x, y, batch_size=32, epochs=3, verbose=0)
    loss, accuracy = model.evaluate(x_test, y_test, verbose=0)
    assert accuracy > 0.95
    assert loss < 0.2 * math.log(2)


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_padding_tokens_do_not_change_the_logits(pooling):
    model = EncoderClassifier(make_backbone(), num_classes=3, pooling=pooling)
    randomize(model)
    ids = padded_batch()
    real = ids != 0
    other = ids.copy()
    other[~real] = np.random.default_rng(1).integers(1, 20, (~real).sum())
    a = np.asarray(model(ids))
    b = np.asarray(model({"token_ids": other, "padding_mask": real}))
    np.testing.assert_allclose(a, b, atol=1e-5)
    # The same ids as real tokens do change the logits: the check can fail.
    assert np.abs(a - np.asarray(model(other))).max() > 1e-3


def test_mean_pooling_averages_real_tokens_only():
    model = EncoderClassifier(make_backbone(), num_classes=3, pooling="mean")
    randomize(model)
    ids = padded_batch()
    hidden = np.asarray(model.backbone(ids), np.float64)
    real = ids != 0
    pooled = np.stack([hidden[i][real[i]].mean(0) for i in range(len(ids))])
    kernel = np.asarray(model.classifier.kernel, np.float64)
    bias = np.asarray(model.classifier.bias, np.float64)
    np.testing.assert_allclose(model(ids), pooled @ kernel + bias, atol=1e-5)


def test_cls_pooling_uses_the_tanh_pooler_on_the_first_token():
    model = EncoderClassifier(make_backbone(), num_classes=3)
    randomize(model)
    ids = padded_batch()
    first = np.asarray(model.backbone(ids), np.float64)[:, 0]
    pooled = np.tanh(first @ model.pooler.kernel.numpy() + model.pooler.bias.numpy())
    want = pooled @ model.classifier.kernel.numpy() + model.classifier.bias.numpy()
    np.testing.assert_allclose(model(ids), want, atol=1e-5)


def test_reuses_a_masked_lm_backbone_without_copying():
    mlm = MaskedLanguageModel(make_backbone())
    classifier = EncoderClassifier(backbone=mlm.backbone, num_classes=2)
    embedding = mlm.backbone.token_embedding.embeddings
    assert classifier.backbone.token_embedding.embeddings is embedding


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_save_and_load_give_identical_outputs(tmp_path, pooling):
    model = EncoderClassifier(
        make_backbone(), num_classes=3, pooling=pooling, dropout=0.1
    )
    randomize(model)
    path = str(tmp_path / "classifier.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    assert isinstance(loaded, EncoderClassifier)
    assert loaded.get_config() == model.get_config()
    ids = padded_batch()
    np.testing.assert_array_equal(loaded(ids), model(ids))


def test_config_holds_the_constructor_arguments():
    config = EncoderClassifier(make_backbone(), 4, pooling="mean").get_config()
    assert (config["num_classes"], config["pooling"], config["dropout"]) == (
        4,
        "mean",
        0.0,
    )
    assert config["backbone"]["config"]["vocabulary_size"] == 20


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"num_classes": 0}, "num_classes=0"),
        ({"num_classes": -2}, "num_classes=-2"),
        ({"num_classes": 2, "pooling": "max"}, "pooling='max'"),
        ({"num_classes": 2, "dropout": -0.1}, "dropout=-0.1"),
    ],
)
def test_bad_arguments_raise(kwargs, message):
    with pytest.raises(ValueError, match=message):
        EncoderClassifier(make_backbone(), **kwargs)


def test_a_backbone_of_another_type_raises():
    with pytest.raises(ValueError, match="backbone"):
        EncoderClassifier(keras.layers.Dense(3), num_classes=2)


@pytest.mark.parametrize(
    "inputs, message",
    [
        (np.ones((2, 3, 4), "int32"), "rank 2"),
        (np.ones((2, 4), "float32"), "float32"),
        (np.ones((2, SEQ + 1), "int32"), "max_sequence_length"),
    ],
)
def test_bad_inputs_raise(inputs, message):
    with pytest.raises(ValueError, match=message):
        EncoderClassifier(make_backbone(), num_classes=2)(inputs)


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision_gives_float32_logits_close_to_float32(policy):
    reference = EncoderClassifier(make_backbone(), num_classes=3, pooling="mean")
    randomize(reference)
    keras.config.set_dtype_policy(policy)
    model = EncoderClassifier(make_backbone(), num_classes=3, pooling="mean")
    model.set_weights(reference.get_weights())
    ids = padded_batch()
    logits = model(ids)
    assert keras.backend.standardize_dtype(logits.dtype) == "float32"
    assert_close_to_float32(logits, reference(ids), policy)

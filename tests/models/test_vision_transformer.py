"""The Vision Transformer: the encoder's blocks on patches of images."""

import re

import keras
import numpy as np
import pytest

from keras_tfm import zoo
from keras_tfm.datasets import digits_splits
from keras_tfm.models import VisionTransformer
from tests.layers import block_reference
from tests.layers import numpy_reference as ref
from tests.layers.layer_harness import randomize_weights
from tests.layers.test_patch_embedding import numpy_patch_embedding

SMALL = dict(image_shape=(4, 6, 2), patch_size=2, num_layers=2, num_heads=2,
             hidden_dim=8, intermediate_dim=12, num_classes=3)  # fmt: skip
IMAGES = np.random.default_rng(0).normal(size=(3, 4, 6, 2)).astype("float32")


@pytest.fixture(scope="module")
def model():
    keras.utils.set_random_seed(0)
    vit = VisionTransformer(**SMALL)
    randomize_weights(vit)
    return vit


def numpy_logits(model, images, pooling="cls"):
    """Float64: patches, pre-LN blocks (no mask), final norm, the head."""
    x = numpy_patch_embedding(model.patch_embedding, images)
    everything = np.ones((len(images), x.shape[1], x.shape[1]), bool)
    for block in model.transformer_layers:
        x = block_reference.block(block, x, everything)
    gamma, beta = (np.asarray(w, np.float64) for w in model.final_norm.weights)
    x = ref.layer_norm(x, gamma, beta, model.layer_norm_epsilon)
    pooled = x[:, 0] if pooling == "cls" else x[:, 1:].mean(1)
    kernel = np.asarray(model.classifier.kernel, np.float64)
    return pooled @ kernel + np.asarray(model.classifier.bias, np.float64)


def test_logits_match_a_numpy_reference(model):
    logits = model(IMAGES)
    assert logits.shape == (3, 3)
    np.testing.assert_allclose(logits, numpy_logits(model, IMAGES), atol=1e-4)


def test_mean_pooling_reads_the_patches_not_the_class_token(model):
    mean = VisionTransformer(**SMALL, pooling="mean")
    mean.set_weights(model.get_weights())
    np.testing.assert_allclose(mean(IMAGES), numpy_logits(mean, IMAGES, "mean"),
                               atol=1e-4)  # fmt: skip


def test_overlapping_patches_reach_the_blocks():
    # 3x3 patches every 2 pixels ("same" padding): the same grid of 2x3
    # tokens, a bigger projection.
    overlapping = VisionTransformer(**dict(SMALL, patch_size=3, patch_stride=2))
    randomize_weights(overlapping)
    assert overlapping.patch_embedding.projection.kernel.shape == (3 * 3 * 2, 8)
    np.testing.assert_allclose(overlapping(IMAGES), numpy_logits(overlapping, IMAGES),
                               atol=1e-4)  # fmt: skip
    config = overlapping.get_config()
    assert config["patch_stride"] == 2
    assert VisionTransformer.from_config(config).get_config() == config


def test_attention_scores_cover_the_class_token_and_every_patch(model):
    logits, scores = model(IMAGES, return_attention_scores=True)
    np.testing.assert_allclose(logits, model(IMAGES), atol=1e-6)
    assert len(scores) == 2
    for layer_scores in scores:
        assert layer_scores.shape == (3, 2, 1 + 6, 1 + 6)  # 2x3 patches
        np.testing.assert_allclose(np.sum(layer_scores, -1), 1.0, atol=1e-5)


def test_config_and_keras_file_round_trip(model, tmp_path):
    config = model.get_config()
    assert VisionTransformer.from_config(config).get_config() == config
    path = tmp_path / "vit.keras"
    model.save(path)
    loaded = keras.models.load_model(path)
    assert isinstance(loaded, VisionTransformer)
    np.testing.assert_allclose(loaded(IMAGES), model(IMAGES), atol=1e-6)


def test_dropout_reaches_the_blocks():
    vit = VisionTransformer(**dict(SMALL, dropout=0.9))
    randomize_weights(vit)
    inference = np.asarray(vit(IMAGES, training=False))
    np.testing.assert_allclose(inference, vit(IMAGES, training=False))
    assert np.abs(np.asarray(vit(IMAGES, training=True)) - inference).max() > 1e-3


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(image_shape=(5, 6, 2)), r"image_shape=\(5, 6, 2\)"),
        (dict(image_shape=(4, 6)), r"image_shape=\(4, 6\)"),
        (dict(patch_size=3, patch_stride=2, image_shape=(4, 5, 2)),
         r"patch_stride=2.*image_shape=\(4, 5, 2\)"),
        (dict(patch_stride=3), "patch_stride=3, patch_size=2"),
        (dict(hidden_dim=7), "hidden_dim=7, num_heads=2"),
        (dict(pooling="max"), "pooling"),
        (dict(num_classes=0), "num_classes=0"),
    ],
)
def test_bad_arguments_are_refused(overrides, message):
    with pytest.raises(ValueError, match=message):
        VisionTransformer(**dict(SMALL, **overrides))


def test_images_of_another_shape_are_refused(model):
    with pytest.raises(ValueError, match=r"images.shape=\(1, 6, 4, 2\)"):
        model(np.zeros((1, 6, 4, 2), "float32"))


def test_the_preset_scores_what_its_card_claims():
    card = zoo.preset_card("vit_digits")
    claimed = float(re.search(r"Test accuracy (0\.\d+)", card).group(1))
    model = zoo.from_preset("vit_digits")
    images, labels = digits_splits(seed=0)["test"]
    accuracy = np.mean(model.predict(images, verbose=0).argmax(-1) == labels)
    assert accuracy >= claimed - 1e-9
    assert claimed > 0.9  # a model that reads the digits

import keras
import numpy as np
import pytest

from keras_tfm.layers import PatchEmbedding
from tests.layers.layer_harness import randomize_weights, run_layer_test


def numpy_patch_embedding(layer, images):
    """Float64 loops: patch (r, c) of p x p pixels, flattened row by row with
    the channels innermost, projected; the class token first; positions added."""
    images = np.asarray(images, np.float64)
    p = layer.patch_size
    kernel = np.asarray(layer.projection.kernel, np.float64)
    bias = np.asarray(layer.projection.bias, np.float64)
    batch, height, width, _ = images.shape
    tokens = []
    for r in range(height // p):
        for c in range(width // p):
            patch = images[:, r * p : (r + 1) * p, c * p : (c + 1) * p, :]
            tokens.append(patch.reshape(batch, -1) @ kernel + bias)
    class_token = np.broadcast_to(np.asarray(layer.class_token, np.float64)[0],
                                  (batch, 1, layer.hidden_dim))  # fmt: skip
    x = np.concatenate([class_token, np.stack(tokens, axis=1)], axis=1)
    return x + np.asarray(layer.position_embedding, np.float64)


def test_matches_a_numpy_reference_with_several_channels():
    images = np.random.default_rng(0).normal(size=(2, 6, 4, 3)).astype("float32")
    layer = PatchEmbedding(patch_size=2, hidden_dim=5)
    layer.build(images.shape)
    randomize_weights(layer)
    assert layer.grid == (3, 2) and layer.num_patches == 6
    np.testing.assert_allclose(layer(images), numpy_patch_embedding(layer, images),
                               atol=1e-5)  # fmt: skip


def test_is_a_conv2d_with_kernel_and_stride_p():
    images = np.random.default_rng(1).normal(size=(2, 8, 8, 2)).astype("float32")
    layer = PatchEmbedding(patch_size=4, hidden_dim=3)
    layer.build(images.shape)
    randomize_weights(layer)
    conv = keras.layers.Conv2D(3, 4, strides=4)
    conv.build(images.shape)
    conv.set_weights([np.asarray(layer.projection.kernel).reshape(4, 4, 2, 3),
                      np.asarray(layer.projection.bias)])  # fmt: skip
    patches = np.asarray(conv(images)).reshape(2, 4, 3)
    expected = patches + np.asarray(layer.position_embedding)[:, 1:]
    np.testing.assert_allclose(np.asarray(layer(images))[:, 1:], expected, atol=1e-5)


def test_layer_contract(tmp_path):
    x = np.random.default_rng(0).normal(size=(2, 4, 4, 1)).astype("float32")
    run_layer_test(
        lambda: PatchEmbedding(patch_size=2, hidden_dim=8),
        {"images": x},
        expected_output_shape=(2, 5, 8),
        tmp_path=tmp_path,
    )


@pytest.mark.parametrize(
    "shape, message",
    [((2, 8, 7, 1), r"images.shape=\(2, 8, 7, 1\)"),
     ((2, 8, 8), r"images.shape=\(2, 8, 8\)")],
)  # fmt: skip
def test_bad_images_are_refused(shape, message):
    with pytest.raises(ValueError, match=message):
        PatchEmbedding(patch_size=2, hidden_dim=4)(np.zeros(shape, "float32"))


@pytest.mark.parametrize("name", ["patch_size", "hidden_dim"])
def test_bad_arguments_are_refused(name):
    arguments = {"patch_size": 2, "hidden_dim": 4, name: 0}
    with pytest.raises(ValueError, match=f"{name}=0"):
        PatchEmbedding(**arguments)

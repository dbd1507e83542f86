import keras
import numpy as np
import pytest

from keras_tfm.layers import PatchEmbedding
from tests.layers.layer_harness import randomize_weights, run_layer_test


def numpy_patch(images, p, s, r, c):
    """Float64: the p x p pixels of patch (r, c), its top left corner at
    (r * s, c * s) minus the (p - s) // 2 pixels of "same" padding before;
    pixels outside the image are zeros."""
    batch, height, width, channels = images.shape
    before = (p - s) // 2
    patch = np.zeros((batch, p, p, channels))
    for i in range(p):
        for j in range(p):
            row, column = r * s - before + i, c * s - before + j
            if 0 <= row < height and 0 <= column < width:
                patch[:, i, j] = images[:, row, column]
    return patch


def numpy_patch_embedding(layer, images):
    """Float64 loops: patch (r, c) of p x p pixels every s pixels, flattened
    row by row with the channels innermost, projected; the class token
    first; positions added."""
    images = np.asarray(images, np.float64)
    p, s = layer.patch_size, layer.patch_stride
    kernel = np.asarray(layer.projection.kernel, np.float64)
    bias = np.asarray(layer.projection.bias, np.float64)
    batch, height, width, _ = images.shape
    tokens = []
    for r in range(height // s):
        for c in range(width // s):
            patch = numpy_patch(images, p, s, r, c)
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


@pytest.mark.parametrize("patch_size, patch_stride", [(4, 4), (3, 1), (4, 2), (3, 2)])
def test_is_a_conv2d_with_kernel_p_stride_s_and_same_padding(patch_size, patch_stride):
    images = np.random.default_rng(1).normal(size=(2, 8, 8, 2)).astype("float32")
    layer = PatchEmbedding(patch_size, hidden_dim=3, patch_stride=patch_stride)
    layer.build(images.shape)
    randomize_weights(layer)
    conv = keras.layers.Conv2D(3, patch_size, strides=patch_stride, padding="same")
    conv.build(images.shape)
    kernel = np.asarray(layer.projection.kernel)
    conv.set_weights([kernel.reshape(patch_size, patch_size, 2, 3),
                      np.asarray(layer.projection.bias)])  # fmt: skip
    patches = np.asarray(conv(images)).reshape(2, layer.num_patches, 3)
    expected = patches + np.asarray(layer.position_embedding)[:, 1:]
    np.testing.assert_allclose(np.asarray(layer(images))[:, 1:], expected, atol=1e-5)


@pytest.mark.parametrize("patch_size, patch_stride", [(3, 1), (4, 2), (3, 2)])
def test_overlapping_patches_match_a_numpy_reference(patch_size, patch_stride):
    images = np.random.default_rng(2).normal(size=(2, 4, 6, 3)).astype("float32")
    layer = PatchEmbedding(patch_size, hidden_dim=5, patch_stride=patch_stride)
    layer.build(images.shape)
    randomize_weights(layer)
    assert layer.grid == (4 // patch_stride, 6 // patch_stride)
    np.testing.assert_allclose(layer(images), numpy_patch_embedding(layer, images),
                               atol=1e-5)  # fmt: skip


def test_one_overlapping_patch_by_hand():
    # 3x3 patches every pixel of a 4x4 image: patch (1, 0) reads rows 0-2 and
    # columns -1..1, the padding column -1 being zeros.
    images = np.arange(16, dtype="float32").reshape(1, 4, 4, 1)
    layer = PatchEmbedding(patch_size=3, hidden_dim=2, patch_stride=1)
    layer.build(images.shape)
    randomize_weights(layer)
    pixels = np.array([0, 0, 1, 0, 4, 5, 0, 8, 9], np.float64)
    kernel = np.asarray(layer.projection.kernel, np.float64)
    expected = pixels @ kernel + np.asarray(layer.projection.bias, np.float64)
    expected += np.asarray(layer.position_embedding, np.float64)[0, 1 + 1 * 4 + 0]
    np.testing.assert_allclose(np.asarray(layer(images))[0, 1 + 4], expected, atol=1e-5)


def test_a_stride_of_patch_size_is_the_non_overlapping_layer():
    images = np.random.default_rng(3).normal(size=(2, 8, 8, 1)).astype("float32")
    old = PatchEmbedding(patch_size=2, hidden_dim=4)
    config = old.get_config()
    assert config["patch_stride"] == 2
    del config["patch_stride"]  # a config written before the argument existed
    loaded = PatchEmbedding.from_config(config)
    strided = PatchEmbedding(patch_size=2, hidden_dim=4, patch_stride=2)
    for layer in (old, loaded, strided):
        layer.build(images.shape)
    randomize_weights(old)
    loaded.set_weights(old.get_weights())
    strided.set_weights(old.get_weights())
    assert loaded.patch_stride == 2 and loaded.num_patches == 16
    np.testing.assert_array_equal(loaded(images), old(images))
    np.testing.assert_array_equal(strided(images), old(images))


def test_layer_contract(tmp_path):
    x = np.random.default_rng(0).normal(size=(2, 4, 4, 1)).astype("float32")
    run_layer_test(
        lambda: PatchEmbedding(patch_size=3, hidden_dim=8, patch_stride=2),
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


@pytest.mark.parametrize("name", ["patch_size", "hidden_dim", "patch_stride"])
def test_bad_arguments_are_refused(name):
    arguments = {"patch_size": 2, "hidden_dim": 4, name: 0}
    with pytest.raises(ValueError, match=f"{name}=0"):
        PatchEmbedding(**arguments)


def test_a_stride_past_the_patch_is_refused():
    with pytest.raises(ValueError, match="patch_stride=3, patch_size=2"):
        PatchEmbedding(patch_size=2, hidden_dim=4, patch_stride=3)


def test_images_not_a_multiple_of_the_stride_are_refused():
    layer = PatchEmbedding(patch_size=3, hidden_dim=4, patch_stride=2)
    with pytest.raises(ValueError, match=r"patch_stride=2.*shape=\(1, 6, 5, 1\)"):
        layer(np.zeros((1, 6, 5, 1), "float32"))

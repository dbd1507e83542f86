import numpy as np

from keras_tfm.kernels import masks


def test_causal_mask_with_offset():
    mask = np.asarray(masks.causal_mask(2, 4, start_index=1))
    np.testing.assert_array_equal(mask[0], [[1, 1, 0, 0], [1, 1, 1, 0]])


def test_merge_masks_ands_and_skips_none():
    a = np.array([[[1, 1, 0]]], bool)
    b = np.array([[[0, 1, 1]]], bool)
    np.testing.assert_array_equal(
        np.asarray(masks.merge_masks(a, None, b)), [[[0, 1, 0]]]
    )
    assert masks.merge_masks(None, None) is None

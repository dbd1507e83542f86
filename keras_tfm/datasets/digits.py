"""scikit-learn's handwritten digits as images, in a fixed stratified split."""

import numpy as np


def digits_splits(seed=0, validation_fraction=0.2, test_fraction=0.2):
    """The 1,797 8x8 digits of `sklearn.datasets.load_digits`, split.

    The images ship inside scikit-learn (UCI's optical recognition of
    handwritten digits, 16 levels of grey); nothing is downloaded. They come
    back as float32 (n, 8, 8, 1) scaled to [0, 1] (the pixel values / 16),
    in a stratified split: `test_fraction` of all images for test,
    `validation_fraction` of all for validation, the rest for training.

    Args:
        seed: the seed of the split.
        validation_fraction: share of all images held out for validation.
        test_fraction: share of all images held out for test.

    Returns:
        A dict with "train", "validation" and "test", each `(images,
        labels)`, labels int32 digits 0-9.

    Example:
    >>> splits = digits_splits()
    >>> [len(splits[name][1]) for name in ("train", "validation", "test")]
    [1077, 360, 360]
    >>> splits["test"][0].shape, float(splits["test"][0].max())
    ((360, 8, 8, 1), 1.0)
    """
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    for name, value in (("validation_fraction", validation_fraction),
                        ("test_fraction", test_fraction)):  # fmt: skip
        if isinstance(value, bool) or not 0 < value < 1:
            raise ValueError(f"`{name}` must be in (0, 1). Received: {name}={value!r}")
    if validation_fraction + test_fraction >= 1:
        raise ValueError(
            "`validation_fraction + test_fraction` must leave images to train "
            f"on. Received: validation_fraction={validation_fraction}, "
            f"test_fraction={test_fraction}"
        )
    digits = load_digits()
    images = (digits.images / 16.0).astype("float32")[..., None]
    labels = digits.target.astype("int32")
    rest_x, test_x, rest_y, test_y = train_test_split(
        images, labels, test_size=test_fraction, stratify=labels, random_state=seed
    )
    train_x, validation_x, train_y, validation_y = train_test_split(
        rest_x, rest_y, test_size=validation_fraction / (1 - test_fraction),
        stratify=rest_y, random_state=seed,
    )  # fmt: skip
    return {
        "train": (train_x, train_y),
        "validation": (validation_x, validation_y),
        "test": (test_x, test_y),
    }


def flattened(images):
    """(n, 64) rows of `images`, for scikit-learn baselines.

    Example:
    >>> flattened(np.zeros((2, 8, 8, 1))).shape
    (2, 64)
    """
    return np.asarray(images).reshape(len(images), -1)

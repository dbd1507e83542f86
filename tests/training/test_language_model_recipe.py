"""The recipe of `keras-tfm train` outside the CLI: its settings and splits."""

import doctest

import keras
import numpy as np
import pytest

from keras_tfm import training
from keras_tfm.training import language_model_recipe


@pytest.fixture
def restored_policy():
    policy = keras.config.dtype_policy()
    yield
    keras.config.set_dtype_policy(policy)


def test_the_docstring_examples(restored_policy):
    result = doctest.testmod(
        language_model_recipe,
        extraglobs={"keras": keras},
        optionflags=doctest.NORMALIZE_WHITESPACE,
    )
    assert result.attempted > 0 and result.failed == 0


def test_device_settings_given_or_the_device_defaults(restored_policy):
    given = training.use_device_settings("mixed_bfloat16", jit_compile=True)
    assert given[:2] == ("mixed_bfloat16", True)
    assert keras.config.dtype_policy().name == "mixed_bfloat16"
    defaults = training.device_defaults()
    assert training.use_device_settings()[:2] == defaults[:2]
    assert training.use_device_settings().reason == defaults.reason


def test_splits_train_on_the_first_nine_tenths_and_hold_out_the_rest():
    class Model:  # a byte-level tokenizer is all the splits read
        def tokenizer(self, text):
            return np.frombuffer(text.encode(), np.uint8).astype("int32")

    model = Model()
    model.tokenizer = Model.tokenizer.__get__(model)
    text = "".join(chr(ord("a") + i % 26) for i in range(1000))
    examples, validation, count = training.language_model_splits(
        model, text, sequence_length=9, batch_size=4
    )
    # 1000 bytes = 100 windows of 9 + 1 tokens: 90 to train, the last 10 held out.
    assert count == 90
    ids = np.frombuffer(text.encode(), np.uint8)
    windows = ids.reshape(100, 10)
    pairs = list(examples.as_numpy_iterator())
    np.testing.assert_array_equal([x for x, _ in pairs], windows[:90, :-1])
    np.testing.assert_array_equal([y for _, y in pairs], windows[:90, 1:])
    held_out = [y for _, labels in validation.as_numpy_iterator() for y in labels]
    np.testing.assert_array_equal(held_out, windows[90:, 1:])

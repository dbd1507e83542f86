"""The runnable example in every kernel module's docstring runs as it says."""

import doctest

import numpy as np
import pytest
from keras import ops

import keras_tfm
from keras_tfm import kernels
from keras_tfm.kernels import activations, attention, masks, plain_attention

MODULES = [activations, attention, kernels, masks, plain_attention]


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_docstring_examples(module):
    result = doctest.testmod(
        module,
        extraglobs={"np": np, "ops": ops, "keras_tfm": keras_tfm},
        optionflags=doctest.NORMALIZE_WHITESPACE,
    )
    assert result.attempted > 0
    assert result.failed == 0

"""The runnable example in every layer's and kernel's docstring runs as it says."""

import doctest

import numpy as np
import pytest
from keras import ops

import keras_tfm
from keras_tfm import kernels
from keras_tfm.kernels import activations, attention, masks, plain_attention
from keras_tfm.layers import (
    decoder_block,
    feed_forward,
    hyperparameters,
    learned_positional_embedding,
    multi_head_self_attention,
    patch_embedding,
    positional_encoding,
    positions,
    rotary_embedding,
    token_embedding,
    transformer_encoder_block,
)

MODULES = [
    activations,
    attention,
    kernels,
    masks,
    plain_attention,
    decoder_block,
    feed_forward,
    hyperparameters,
    learned_positional_embedding,
    multi_head_self_attention,
    patch_embedding,
    positional_encoding,
    positions,
    rotary_embedding,
    token_embedding,
    transformer_encoder_block,
]


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_docstring_examples(module):
    result = doctest.testmod(
        module,
        extraglobs={"np": np, "ops": ops, "keras_tfm": keras_tfm},
        optionflags=doctest.NORMALIZE_WHITESPACE,
    )
    assert result.attempted > 0
    assert result.failed == 0

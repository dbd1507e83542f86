"""The runnable example in every layer's docstring runs and prints what it says."""

import doctest

import numpy as np
import pytest
from keras import ops

import keras_tfm
from keras_tfm.layers import (
    decoder_block,
    feed_forward,
    learned_positional_embedding,
    multi_head_self_attention,
    positional_encoding,
    rotary_embedding,
    token_embedding,
    transformer_encoder_block,
)

MODULES = [
    decoder_block,
    feed_forward,
    learned_positional_embedding,
    multi_head_self_attention,
    positional_encoding,
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

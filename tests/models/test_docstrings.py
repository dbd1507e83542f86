"""Each model module's docstring example runs and prints what it says."""

import doctest

import numpy as np
import pytest
from keras import ops

import keras_tfm
from keras_tfm import datasets
from keras_tfm.datasets import digits
from keras_tfm.generation import (
    backend,
    buffers,
    cached_steps,
    compiled_loops,
    decode_loop,
    generation_config,
    logit_processors,
    outputs,
    request,
    sampling,
    scoring,
    stop_strings,
    strategies,
)
from keras_tfm.layers import normalization
from keras_tfm.models import (
    _common,
    causal_lm,
    causal_lm_preprocessor,
    chat_examples,
    decoder_backbone,
    encoder_backbone,
    encoder_classifier,
    legacy_configs,
    masked_language_model,
    masked_lm_preprocessor,
    preprocessor,
    preset_loading,
    seq2seq_backbone,
    seq2seq_lm,
    seq2seq_lm_preprocessor,
    text_batches,
    text_classifier_preprocessor,
    text_inputs,
    vision_transformer,
)

MODULES = [
    _common,
    backend,
    buffers,
    causal_lm,
    cached_steps,
    causal_lm_preprocessor,
    chat_examples,
    compiled_loops,
    datasets,
    decode_loop,
    decoder_backbone,
    digits,
    encoder_backbone,
    encoder_classifier,
    generation_config,
    legacy_configs,
    logit_processors,
    masked_language_model,
    masked_lm_preprocessor,
    normalization,
    outputs,
    preprocessor,
    preset_loading,
    request,
    sampling,
    scoring,
    seq2seq_backbone,
    seq2seq_lm,
    seq2seq_lm_preprocessor,
    stop_strings,
    strategies,
    text_batches,
    text_classifier_preprocessor,
    text_inputs,
    vision_transformer,
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

"""The LiteRT chat's NumPy sampler draws the tokens of the engine's sampler.

`keras_tfm.lite.sampling` against `keras_tfm.generation.sampling` (compiled
by XLA, as the decoding loop runs it) on injected logits: the same tokens
for every row, setting and position; and, as a statistical check of both,
the draws of one row over many positions follow the warped distribution.
"""

import doctest

import keras
import numpy as np
import pytest

from keras_tfm.generation import sampling as engine
from keras_tfm.generation.generation_config import GenerationConfig, settings_tensors
from keras_tfm.lite import sampling

CONFIGS = [
    GenerationConfig(),
    GenerationConfig(sampler="random", seed=1),
    GenerationConfig(sampler="random", temperature=0.5, seed=2),
    GenerationConfig(sampler="top_k", top_k=3, seed=3),
    GenerationConfig(sampler="top_p", top_p=0.9, temperature=0.7, seed=4),
    GenerationConfig(sampler="top_p", top_p=0.5, top_k=8, seed=-5),
    GenerationConfig(sampler="random", min_p=0.1, temperature=1.3, seed=2**40 + 7),
    GenerationConfig(sampler="top_p", top_p=1.0, min_p=0.05, seed=0),
]


def _engine_function():
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        return tf.function(engine.next_tokens, jit_compile=True)
    return engine.next_tokens


@pytest.mark.parametrize("scale", [0.5, 3.0])  # flat and peaked distributions
def test_the_numpy_sampler_draws_the_engines_tokens(scale):
    rng = np.random.default_rng(0)
    settings = settings_tensors(CONFIGS * 4)
    logits = (scale * rng.standard_normal((len(CONFIGS) * 4, 97))).astype("float32")
    compiled = _engine_function()
    for position in (0, 1, 37, 511):
        want = np.asarray(compiled(logits, settings, np.int32(position)))
        got = sampling.next_tokens(logits, settings, position)
        np.testing.assert_array_equal(got, want)


def test_a_row_samples_the_warped_distribution():
    # top_p 0.8 at temperature 1 over four tokens (0.5, 0.3, 0.15, 0.05):
    # the first two (0.8 before the third) are kept, renormalized.
    probabilities = np.array([0.5, 0.3, 0.15, 0.05])
    logits = np.log(probabilities).astype("float32")[None, :]
    settings = settings_tensors([GenerationConfig(sampler="top_p", top_p=0.8, seed=9)])
    draws = [int(sampling.next_tokens(logits, settings, p)[0]) for p in range(4000)]
    counts = np.bincount(draws, minlength=4) / len(draws)
    np.testing.assert_allclose(counts, [0.625, 0.375, 0, 0], atol=0.03)


def test_docstring_examples():
    result = doctest.testmod(sampling, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0 and result.attempted > 0


def test_the_litert_chat_refuses_what_it_does_not_draw():
    from keras_tfm.lite.litert_chat import _chooser

    with pytest.raises(ValueError, match="no logit processor.*repetition_penalty=1.2"):
        _chooser(GenerationConfig(sampler="top_p", repetition_penalty=1.2))
    with pytest.raises(ValueError, match="no logit processor.*sampler='beam'"):
        _chooser(GenerationConfig(num_beams=2))

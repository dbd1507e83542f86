"""A compiled decoding step is compiled once, whatever position it decodes.

XLA compiles an input it needs as a constant (e.g. the start of `tf.slice`)
into the program: the step would be compiled again for each new position
(5 s a token for SmolLM2 on a 2-core CPU). The programs XLA builds for two
positions must therefore be the same program.
"""

import numpy as np
import pytest

from keras_tfm import layers
from keras_tfm.generation import generation_utils as gen
from keras_tfm.generation.generation_config import GenerationConfig, settings_tensors
from tests.builders import causal_lm


def program(function, *args):
    return function.experimental_get_compiler_ir(*args)(stage="hlo")


@pytest.mark.parametrize("position_encoding", ["learned", "rotary", "sinusoidal"])
def test_the_streamed_step_is_one_program_for_every_position(position_encoding):
    model = causal_lm(
        vocabulary_size=50, num_layers=1, num_heads=2, hidden_dim=8,
        intermediate_dim=16, max_sequence_length=32,
        position_encoding=position_encoding,
    )  # fmt: skip
    streamed = list(model.generate([1, 2, 3], 3, stream=True))
    assert len(streamed) == 3
    # Another prompt streams with the same compiled step.
    assert list(model.generate([4, 5], 2, stream=True)) != []
    ((prefill, step),) = model.compiled_loops.values()
    tokens = np.ones((1, 8), "int32")
    mask = np.zeros((1, 8), bool)
    context, cache = prefill((), tokens, np.int32(3))
    settings = settings_tensors([GenerationConfig()])
    assert program(step, context, tokens, cache, np.int32(4), mask, settings) == (
        program(step, context, tokens, cache, np.int32(6), mask, settings)
    )


def test_previous_token_and_learned_positions_take_the_index_at_run_time():
    import tensorflow as tf

    tokens = np.arange(12, dtype="int32").reshape(2, 6)
    take = tf.function(gen.previous_token, jit_compile=True)
    np.testing.assert_array_equal(take(tokens, np.int32(4)), tokens[:, 3:4])
    assert program(take, tokens, np.int32(2)) == program(take, tokens, np.int32(5))

    positions = layers.LearnedPositionalEmbedding(max_sequence_length=10)
    x = np.zeros((1, 2, 4), "float32")
    positions(x)
    table = np.asarray(positions.embeddings)
    shifted = tf.function(lambda x, i: positions(x, start_index=i), jit_compile=True)
    np.testing.assert_allclose(shifted(x, np.int32(3)), table[None, 3:5])
    assert program(shifted, x, np.int32(1)) == program(shifted, x, np.int32(7))


@pytest.mark.parametrize("padding_id", [None, 0])
def test_prefill_captures_no_all_ones_mask_between_its_loops(padding_id):
    # Without a padding id the cached steps get no mask: an all-ones
    # constant captured by both chunk loops made the persistent XLA cache's
    # key vary between processes (see gen.cache_padding_mask).
    model = causal_lm(
        vocabulary_size=16, num_layers=1, num_heads=1, hidden_dim=8,
        intermediate_dim=8, max_sequence_length=64, padding_id=padding_id,
    )  # fmt: skip
    seen = []
    original = model.backbone.call_with_cache

    def recording(token_ids, caches, index, padding_mask=None):
        seen.append(padding_mask)
        return original(token_ids, caches, index, padding_mask)

    model.backbone.call_with_cache = recording
    tokens = np.array([[3, 4, 5, 0, 0, 0, 0, 0] * 4], "int32")
    model.prefill((), tokens, np.int32(3))
    if padding_id is None:
        assert seen and all(mask is None for mask in seen)
    else:
        masks = [np.asarray(mask) for mask in seen]
        assert all(np.array_equal(m, tokens != 0) for m in masks)


def test_a_short_streamed_prompt_goes_through_the_step_and_traces_no_prefill():
    # A one-shot `keras-tfm chat` pays the tracing and loading of each
    # compiled function it calls: a short prompt needs only the step.
    model = causal_lm(
        vocabulary_size=50, num_layers=1, num_heads=2, hidden_dim=8,
        intermediate_dim=16, max_sequence_length=64,
    )  # fmt: skip
    whole = model.generate([1, 2, 3, 4, 5], 6)
    model.compiled_loops.invalidate()
    streamed = [int(t) for t in model.generate([1, 2, 3, 4, 5], 6, stream=True)]
    assert streamed == [int(t) for t in whole[5:]]
    ((prefill, step),) = model.compiled_loops.values()
    assert prefill.experimental_get_tracing_count() == 0
    assert step.experimental_get_tracing_count() == 1
    # A new prompt length and a sampler setting reuse the one traced step.
    list(model.generate([7, 8], 3, stream=True, sampler="top_k", top_k=5, seed=1))
    assert step.experimental_get_tracing_count() == 1
    # Past `prompt_through_step` the prompt goes through the prefill.
    model.prompt_through_step = 2
    long = [int(t) for t in model.generate([1, 2, 3, 4, 5], 6, stream=True)]
    assert long == streamed
    assert prefill.experimental_get_tracing_count() == 1

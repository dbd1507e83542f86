"""A compiled decoding step is compiled once, whatever position it decodes.

XLA compiles an input it needs as a constant (e.g. the start of `tf.slice`)
into the program: the step would be compiled again for each new position
(5 s a token for SmolLM2 on a 2-core CPU). The programs XLA builds for two
positions must therefore be the same program.
"""

import numpy as np
import pytest

from keras_tfm import layers
from keras_tfm.generation import cached_steps
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
    model.prompt_through_step = 4  # the step of its own (`keras-tfm chat`)
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
    take = tf.function(cached_steps.previous_token, jit_compile=True)
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
    # key vary between processes (see cached_steps.cache_padding_mask).
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


def test_a_buffer_shorter_than_the_big_chunk_traces_the_model_twice():
    # Prefill's chunks of 128 could run only for a prompt filling the buffer
    # (never when generating): a shorter buffer's loop traces the small
    # chunk and the step, not a third copy of the model.
    model = causal_lm(
        vocabulary_size=40, num_layers=1, num_heads=2, hidden_dim=8,
        intermediate_dim=16, max_sequence_length=256,
    )  # fmt: skip
    traces = []
    original = model.backbone.call_with_cache

    def counting(*args, **kwargs):
        traces.append(args[0].shape[1])
        return original(*args, **kwargs)

    model.backbone.call_with_cache = counting
    model.generate([[1, 2, 3]], 4)  # a buffer of decode_loop's 16 multiples
    assert sorted(traces) == [1, 16]
    traces.clear()
    model.compiled_loops.invalidate()
    model.generate([[1 + i % 39 for i in range(140)]], 4)
    assert sorted(traces) == [1, 16, 128]

    # A prompt that fills a short buffer goes through the small chunks.
    tokens = np.array([[5, 9, 2, 7, 1, 3, 8, 6, 4, 2, 9, 5, 1, 7, 3, 8, 2, 6]])
    model.backbone.call_with_cache = original
    cache = model.prefill((), tokens, np.int32(18))
    _, reference = model.backbone.call_with_cache(
        tokens, model.backbone.empty_cache(1, 18), 0
    )
    for layer, expected in zip(cache, reference, strict=True):
        np.testing.assert_allclose(
            np.asarray(layer), np.asarray(expected), rtol=1e-5, atol=1e-6
        )


def test_a_short_streamed_prompt_goes_through_the_step_and_traces_no_prefill():
    # A one-shot `keras-tfm chat` pays the tracing and loading of each
    # compiled function it calls: a short prompt needs only the step.
    model = causal_lm(
        vocabulary_size=50, num_layers=1, num_heads=2, hidden_dim=8,
        intermediate_dim=16, max_sequence_length=64,
    )  # fmt: skip
    model.prompt_through_step = 64  # as `keras-tfm chat` sets it
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
    # Past `prompt_through_step` the prompt goes through the shared loop.
    model.prompt_through_step = 2
    long = [int(t) for t in model.generate([1, 2, 3, 4, 5], 6, stream=True)]
    assert long == streamed
    assert prefill.experimental_get_tracing_count() == 0
    assert len(model.compiled_loops) == 2


def test_scores_alternatives_and_streaming_run_on_the_one_compiled_loop():
    # Modes that differ only in what they record or when the host reads
    # the tokens share the whole loop's program: no new trace, and streamed
    # tokens are the whole loop's, token for token.
    model = causal_lm(
        vocabulary_size=40, num_layers=1, num_heads=2, hidden_dim=8,
        intermediate_dim=16, max_sequence_length=64,
    )  # fmt: skip
    prompts = [[1, 2, 3, 4, 5], [6, 7]]
    sampled = dict(sampler="top_k", top_k=5, temperature=1.5, seed=3)
    whole = model.generate(prompts, 6)
    whole_sampled = model.generate(prompts, 6, stop_token_ids=[9], **sampled)
    (loop,) = model.compiled_loops.values()
    _, scores, top = model.generate(prompts, 6, return_scores=True, top_logprobs=3)
    assert [len(step) for row in top for step in row] == [3] * 12
    # The first alternative is greedy's token, with its score.
    for row, prompt, row_scores, row_top in zip(
        whole, prompts, scores, top, strict=True
    ):
        assert [step[0][0] for step in row_top] == row[len(prompt) :]
        np.testing.assert_allclose([s[0][1] for s in row_top], row_scores)
    for settings, expected in (({}, whole), (dict(stop_token_ids=[9], **sampled),
                                             whole_sampled)):  # fmt: skip
        rows = [list(p) for p in prompts]
        for step in model.generate(prompts, 6, stream=True, **settings):
            for row, token in zip(rows, step, strict=True):
                if token is not None:
                    row.append(token)
        assert rows == [[int(t) for t in row] for row in expected]
    assert list(model.compiled_loops.values()) == [loop]
    assert loop.experimental_get_tracing_count() == 1
    # Past the recorded 20 alternatives, a loop of its own.
    _, _, more = model.generate(prompts, 2, return_scores=True, top_logprobs=25)
    assert [len(step) for step in more[0]] == [25, 25]
    for few, many in zip(top[0][:2], more[0], strict=True):
        assert [t for t, _ in many[:3]] == [t for t, _ in few]
        np.testing.assert_allclose([v for _, v in many[:3]], [v for _, v in few])
    assert len(model.compiled_loops) == 2

"""A (batch,) `cache_update_index`: each row decodes at its own position.

The continuous batching of `keras_tfm.serving` keeps requests of different
lengths in one cache; a step with a vector index must give each row what a
scalar-index step gives that row alone, and never write or read another
row's positions.
"""

import numpy as np
import pytest

from tests.builders import causal_lm

MAX_LENGTH = 16


def tiny(position_encoding):
    return causal_lm(
        vocabulary_size=40, num_layers=2, num_heads=2, hidden_dim=16,
        intermediate_dim=32, max_sequence_length=MAX_LENGTH,
        position_encoding=position_encoding, num_key_value_heads=1,
    )  # fmt: skip


def prefill_alone(model, prompt):
    """The prompt's cache (1, ...) written at index 0, one row alone."""
    cache = model.empty_cache(1, MAX_LENGTH)
    _, cache = model.call_with_cache(np.array([prompt]), cache, 0)
    return np.asarray(cache)


@pytest.mark.parametrize("position_encoding", ["rotary", "learned", "sinusoidal"])
def test_a_vector_index_step_equals_each_row_alone(position_encoding):
    model = tiny(position_encoding)
    rng = np.random.default_rng(0)
    prompts = [list(rng.integers(1, 40, n)) for n in (3, 7, 1)]
    caches = [prefill_alone(model, p) for p in prompts]
    # Stale values past each row's length: a slot's earlier request.
    batch_cache = np.concatenate(caches, 0)
    for i, p in enumerate(prompts):
        batch_cache[i, :, :, len(p) :] = rng.normal(
            size=batch_cache[i, :, :, len(p) :].shape
        )
    next_tokens = np.array([[5], [9], [33]])
    index = np.array([len(p) for p in prompts], "int32")
    logits, updated = model.call_with_cache(next_tokens, batch_cache, index)
    logits, updated = np.asarray(logits), np.asarray(updated)
    for i, p in enumerate(prompts):
        alone, alone_cache = model.call_with_cache(
            next_tokens[i : i + 1], caches[i], len(p)
        )
        np.testing.assert_allclose(logits[i], np.asarray(alone)[0], atol=1e-6)
        # The row's own position is written; nothing else of it changes.
        np.testing.assert_allclose(
            updated[i, :, :, len(p)], np.asarray(alone_cache)[0, :, :, len(p)],
            atol=1e-6,
        )  # fmt: skip
        untouched = np.ones(MAX_LENGTH, bool)
        untouched[len(p)] = False
        np.testing.assert_array_equal(
            updated[i, :, :, untouched], batch_cache[i, :, :, untouched]
        )


def test_a_vector_index_prefills_several_tokens_per_row():
    model = tiny("rotary")
    prompts = [[4, 5, 6, 7], [8, 9, 10, 11]]
    starts = np.array([0, 2], "int32")
    # Row 1 first gets two tokens alone, then four more at its own index 2.
    row1 = prefill_alone(model, [20, 21])
    batch_cache = np.concatenate([np.asarray(model.empty_cache(1, MAX_LENGTH)), row1])
    logits, _ = model.call_with_cache(np.array(prompts), batch_cache, starts)
    full0 = np.asarray(model(np.array([prompts[0]])))[0]
    full1 = np.asarray(model(np.array([[20, 21] + prompts[1]])))[0, 2:]
    np.testing.assert_allclose(np.asarray(logits)[0], full0, atol=1e-5)
    np.testing.assert_allclose(np.asarray(logits)[1], full1, atol=1e-5)

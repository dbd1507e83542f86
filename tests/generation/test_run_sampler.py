"""`run_sampler`: keras-hub's sampling loop with an end index."""

import keras_hub
import numpy as np
from keras import ops

from keras_tfm.generation.buffers import rounded_length
from keras_tfm.generation.keras_hub_samplers import run_sampler

VOCAB = 10


def next_token_is_index_plus_one(prompt, cache, index):
    """Injected logits: the argmax at step `index` is `index + 1`."""
    batch = ops.shape(prompt)[0]
    logits = ops.one_hot(ops.full((batch,), index + 1), VOCAB) * 10.0
    return logits, None, cache + 1


def test_decodes_from_index_to_end_and_leaves_the_rest():
    prompt = np.array([[7, 7, 0, 0, 0, 0, 0, 0], [7, 7, 7, 0, 0, 0, 0, 0]], "int32")
    mask = prompt != 0

    sampler = keras_hub.samplers.GreedySampler()
    out = run_sampler(
        sampler,
        next_token_is_index_plus_one,
        prompt,
        ops.zeros((), "int32"),
        2,
        mask,
        None,
        end=5,
    )
    # Positions 2..4 decoded (index + 1), except the given prompt token at
    # row 1, position 2; positions 5.. untouched.
    np.testing.assert_array_equal(
        np.asarray(out),
        [[7, 7, 3, 4, 5, 0, 0, 0], [7, 7, 7, 4, 5, 0, 0, 0]],
    )


def test_without_end_runs_to_the_buffer_end():
    prompt = np.array([[7, 0, 0, 0]], "int32")
    out = run_sampler(
        keras_hub.samplers.GreedySampler(),
        next_token_is_index_plus_one,
        prompt,
        ops.zeros((), "int32"),
        1,
        prompt != 0,
        None,
    )
    np.testing.assert_array_equal(np.asarray(out), [[7, 2, 3, 4]])


def test_stops_when_every_row_has_a_stop_id():
    prompt = np.array([[7, 0, 0, 0, 0, 0]], "int32")
    out = run_sampler(
        keras_hub.samplers.GreedySampler(),
        next_token_is_index_plus_one,
        prompt,
        ops.zeros((), "int32"),
        1,
        prompt != 0,
        (3,),
    )
    np.testing.assert_array_equal(np.asarray(out), [[7, 2, 3, 0, 0, 0]])


def test_a_stop_id_equal_to_the_fill_id_stops_only_once_decoded():
    # GPT-2's scheme: the end token is also the padding id (0 here), so the
    # slots not decoded yet hold it. Decoding must run until the model
    # itself produces it: at step 4 the injected logits give 4 % 4 = 0.
    def next_token_is_index_mod_4(prompt, cache, index):
        batch = ops.shape(prompt)[0]
        logits = ops.one_hot(ops.full((batch,), (index + 1) % 4), VOCAB) * 10.0
        return logits, None, cache + 1

    prompt = np.array([[7, 0, 0, 0, 0, 0, 0, 0]], "int32")
    out = run_sampler(
        keras_hub.samplers.GreedySampler(),
        next_token_is_index_mod_4,
        prompt,
        ops.zeros((), "int32"),
        1,
        prompt != 0,
        (0,),
    )
    np.testing.assert_array_equal(np.asarray(out), [[7, 2, 3, 0, 0, 0, 0, 0]])


def test_rounded_length():
    assert [rounded_length(n) for n in (1, 8, 9, 16, 17)] == [8, 8, 16, 16, 24]

"""The engine's loops are traced without the Python stack of each op.

XLA keeps each traced op's stack, frozen into strings, for as long as the
compiled program lives (453 MiB for SmolLM2's four decoding loops); the engine's
`compile_loop` traces with the recording off and gives the process its
setting back afterwards.
"""

import threading

import keras
import numpy as np
import pytest

from keras_tfm._op_stack_traces import (
    record_op_stack_traces,
    recording_op_stack_traces,
    without_op_stack_traces,
)
from keras_tfm.generation.backend import compile_loop
from tests.builders import causal_lm
from tests.generation.uncached import greedy_uncached

pytestmark = pytest.mark.skipif(
    keras.backend.backend() != "tensorflow", reason="TensorFlow's graph ops"
)


@pytest.fixture
def recording_on():
    """As in a user's process (the tests' conftest turns recording off)."""
    before = recording_op_stack_traces()
    record_op_stack_traces(True)
    yield
    record_op_stack_traces(before)


def recorded(function, spec):
    import tensorflow as tf

    graph = tf.function(function).get_concrete_function(spec).graph
    return {op.traceback is not None for op in graph.get_operations()}


def test_a_compiled_loop_records_no_op_stacks_and_others_still_do(recording_on):
    import tensorflow as tf

    spec = tf.TensorSpec([2], "float32")
    loop = compile_loop(lambda x: keras.ops.sum(x * 2.0) + 1.0, jit_compile=True)
    ops = loop.get_concrete_function(spec).graph.get_operations()
    # tf.function makes the arguments and results around the traced body.
    body = [op for op in ops if op.type not in ("Placeholder", "Identity")]
    assert body and {op.traceback is None for op in body} == {True}
    np.testing.assert_allclose(loop(np.array([1.0, 2.0], "float32")), 7.0)
    # The process's setting is back: a function traced after it records.
    assert recorded(lambda x: x * 3.0, spec) == {True}


def test_the_setting_comes_back_after_nested_and_concurrent_blocks(recording_on):
    entered, release = threading.Barrier(2), threading.Event()

    def other_thread():
        with without_op_stack_traces():
            entered.wait()
            release.wait(timeout=10)

    thread = threading.Thread(target=other_thread)
    thread.start()
    entered.wait()
    with without_op_stack_traces():
        with without_op_stack_traces():
            assert recording_op_stack_traces() is False
        assert recording_op_stack_traces() is False
    assert recording_op_stack_traces() is False  # the other block still runs
    release.set()
    thread.join()
    assert recording_op_stack_traces() is True


def test_a_model_decodes_the_same_through_the_untraced_loop(recording_on):
    model = causal_lm(
        vocabulary_size=40, num_layers=1, num_heads=2, hidden_dim=8,
        intermediate_dim=16, max_sequence_length=16,
    )  # fmt: skip
    prompt = [3, 5, 7]
    assert model.generate(prompt, 4) == greedy_uncached(model, prompt, 4)


def test_the_module_example(recording_on):
    import doctest

    import keras_tfm._op_stack_traces as module

    assert doctest.testmod(module).failed == 0

"""Whether TensorFlow records the Python stack of each graph op it creates.

TensorFlow keeps, for every op a `tf.function` traces, the Python stack that
created it, and XLA's compilation of the function freezes each of those
stacks into strings (`StackTraceWrapper::LastUserFrame`) that live as long
as the function: 453 MiB for SmolLM2's four decoding programs (greedy and
sampling, beam search, the draft's two), about what the four hold besides
(docs/benchmarks/decoding.md). The engine traces its loops without them
(`keras_tfm.generation.backend.compile_loop`); a runtime error inside one
then reads "<stack traces unavailable>" where it would name the line that
made the op (errors raised while tracing, shapes and Python exceptions,
keep theirs).

TensorFlow has no public setting for it: the switch is the default of the
`extract_traceback` argument of `tensorflow.python.framework.ops._create_c_op`
(tests/generation/test_op_stack_traces.py fails if that changes).

Example:
>>> import tensorflow as tf
>>> with without_op_stack_traces():
...     graph = tf.function(lambda x: x * 2).get_concrete_function(
...         tf.TensorSpec([2])).graph
>>> {op.traceback is None for op in graph.get_operations()}
{True}
"""

import contextlib
import threading

_lock = threading.Lock()
_state = {"depth": 0, "saved": None}


def _create_c_op():
    """`_create_c_op` under TensorFlow's filter, or None where it differs."""
    from tensorflow.python.framework import ops

    create = getattr(ops._create_c_op, "__wrapped__", None)
    if create is None or not create.__defaults__ or len(create.__defaults__) != 2:
        return None
    return create


def record_op_stack_traces(on):
    """Turns the recording on or off for every op created from now on."""
    create = _create_c_op()
    if create is not None:
        create.__defaults__ = (create.__defaults__[0], bool(on))


def recording_op_stack_traces():
    """Whether ops created now record their stack (None where unknown)."""
    create = _create_c_op()
    return None if create is None else create.__defaults__[1]


@contextlib.contextmanager
def without_op_stack_traces():
    """Ops created inside the block record no stack; the setting before it
    comes back when the last such block (in any thread) ends."""
    with _lock:
        if _state["depth"] == 0:
            _state["saved"] = recording_op_stack_traces()
            record_op_stack_traces(False)
        _state["depth"] += 1
    try:
        yield
    finally:
        with _lock:
            _state["depth"] -= 1
            if _state["depth"] == 0 and _state["saved"] is not None:
                record_op_stack_traces(_state["saved"])

"""`plain_kernels()`: lengths unknown when a graph is traced take the plain kernels.

Attention (`attention.dot_product_attention`) and the feed-forward network
(`keras_tfm.layers.FeedForward`) switch to tiled or chunked computations for
inputs of 1,024 positions or more, which keep the memory of the backward
pass linear in the length. When a length is unknown when a graph is traced
(an exported signature takes any length), they trace both computations, a
`tf.cond` choosing when the graph runs, and a custom gradient. A graph that
only ever runs forward, on chunks its caller keeps short, needs neither:
an exported decoding loop prefills by chunks of at most 128 positions and
decodes one at a time. Inside `with plain_kernels():` an unknown length
takes the plain computation, which halves the tracing of SmolLM2's
exported decoding loop, and `tf.saved_model.save` has no gradient
functions to trace.

Known lengths are not affected: a graph traced for a known length takes the
kernel that length takes outside the scope.

Example:
>>> import numpy as np, tensorflow as tf
>>> from keras_tfm.kernels.attention import dot_product_attention
>>> spec = tf.TensorSpec((1, None, 2, 4))  # a length unknown when traced
>>> def op_types(function):
...     graph = tf.function(function).get_concrete_function(spec).graph
...     return {op.type for op in graph.get_operations()}
>>> attend = lambda x: dot_product_attention(x, x, x, causal_start=0)[0]
>>> sorted(op_types(attend) & {"If", "StatelessIf"})  # a run-time choice
['StatelessIf']
>>> with plain_kernels():
...     sorted(op_types(attend) & {"If", "StatelessIf"})
[]
"""

from keras_tfm.kernels.trace_setting import TraceSetting

_active = TraceSetting(default=False)


def plain_kernels():
    """A scope in which unknown lengths trace the plain kernels (see module)."""
    return _active.set(True)


def active():
    """Whether the calling thread is inside `plain_kernels()`."""
    return _active.get()

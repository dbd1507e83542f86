"""`plain_kernels()`: unknown lengths trace the plain kernels, same numbers."""

import doctest

import numpy as np
import tensorflow as tf

from keras_tfm.kernels import plain_scope
from keras_tfm.kernels.attention import dot_product_attention
from keras_tfm.layers import FeedForward


def test_docstring_example():
    result = doctest.testmod(plain_scope)
    assert result.attempted > 0 and result.failed == 0


def test_an_unknown_length_traces_the_plain_kernels_with_the_same_outputs():
    # Outside the scope, attention and the feed-forward network trace a
    # run-time choice (a cond) and the tiled loops; inside, one plain
    # computation: no cond, no while loop, and the outputs of the known
    # length's plain path, here 6 positions (so the run-time choice is
    # plain too).
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 6, 8)).astype("float32")
    q = rng.normal(size=(2, 6, 4, 2)).astype("float32")
    ffn = FeedForward(16, activation="swiglu")
    ffn.build((None, None, 8))

    def both(x, q):
        return ffn(x), dot_product_attention(q, q, q, causal_start=0)[0]

    specs = (tf.TensorSpec((None, None, 8)), tf.TensorSpec((None, None, 4, 2)))
    outside = tf.function(both).get_concrete_function(*specs)
    with plain_scope.plain_kernels():
        inside = tf.function(both).get_concrete_function(*specs)
    assert not plain_scope.active()

    def control_flow(concrete):
        types = {op.type for op in concrete.graph.get_operations()}
        return types & {"If", "StatelessIf", "While", "StatelessWhile"}

    assert control_flow(outside)
    assert not control_flow(inside)
    expected = both(x, q)  # eager: the lengths are known, 6 < 1024: plain
    for got in (inside(x, q), outside(x, q)):
        for g, e in zip(got, expected, strict=True):
            np.testing.assert_allclose(g, e, rtol=1e-6, atol=1e-6)

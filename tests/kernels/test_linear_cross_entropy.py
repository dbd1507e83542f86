import doctest
import re

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_tfm.kernels import linear_cross_entropy as kernel_module
from keras_tfm.kernels.linear_cross_entropy import (
    default_chunk_size,
    linear_cross_entropy,
)

VOCABULARY, HIDDEN = 11, 8


def reference(hidden, table, labels, upstream, eps):
    """Loss and gradients in float64 NumPy, from the whole logits."""
    h, e = hidden.astype("float64"), table.astype("float64")
    z = h @ e.T
    top = z.max(-1, keepdims=True)
    lse = top[..., 0] + np.log(np.exp(z - top).sum(-1))
    label_logit = np.take_along_axis(z, labels[..., None], -1)[..., 0]
    loss = lse - (1 - eps) * label_logit - eps * z.mean(-1)
    target = (1 - eps) * np.eye(len(e))[labels] + eps / len(e)
    d_logits = (np.exp(z - lse[..., None]) - target) * upstream[..., None]
    d_table = d_logits.reshape(-1, len(e)).T @ h.reshape(-1, h.shape[-1])
    return loss, d_logits @ e, d_table


def computed(hidden, table, labels, upstream, eps, chunk_size, signature=None):
    variables = tf.Variable(hidden), tf.Variable(table)

    @tf.function(input_signature=signature)
    def step(labels):
        with tf.GradientTape() as tape:
            loss = linear_cross_entropy(*variables, labels, eps, chunk_size)
            weighted = tf.reduce_sum(loss * upstream)
        return loss, tape.gradient(weighted, variables)

    loss, grads = step(labels)
    return [np.asarray(t) for t in (loss, *grads)]


@pytest.mark.parametrize("eps", [0.0, 0.1])
@pytest.mark.parametrize(
    "shape, chunk_size",
    [((3, 5), 4), ((2, 6), 3), ((1, 4), 64), ((2, 3), 1), ((2, 7), None)],
    ids=["ragged", "even", "one-chunk", "one-token-chunks", "default"],
)
def test_loss_and_gradients_equal_a_float64_reference(shape, chunk_size, eps):
    rng = np.random.default_rng(0)
    hidden = rng.normal(size=(*shape, HIDDEN)).astype("float32")
    table = rng.normal(size=(VOCABULARY, HIDDEN)).astype("float32")
    labels = rng.integers(0, VOCABULARY, size=shape).astype("int32")
    labels.flat[0] = labels.flat[-1]  # a label twice: its table row sums both
    upstream = rng.normal(size=shape).astype("float32")
    got = computed(hidden, table, labels, upstream, eps, chunk_size)
    expected = reference(hidden, table, labels, upstream, eps)
    for name, a, b in zip(["loss", "d_hidden", "d_table"], got, expected, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=2e-6, err_msg=name)


def test_a_batch_unknown_when_traced_and_an_empty_batch():
    rng = np.random.default_rng(1)
    table = rng.normal(size=(VOCABULARY, HIDDEN)).astype("float32")
    signature = [tf.TensorSpec([None, None], tf.int32)]
    for rows in (3, 0):
        hidden = rng.normal(size=(rows, 5, HIDDEN)).astype("float32")
        labels = rng.integers(0, VOCABULARY, size=(rows, 5)).astype("int32")
        upstream = np.ones((rows, 5), "float32")
        got = computed(hidden, table, labels, upstream, 0.0, 4, signature)
        expected = reference(hidden, table, labels, upstream, 0.0)
        for a, b in zip(got, expected, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=2e-6)


def test_bfloat16_products_keep_float32_losses():
    rng = np.random.default_rng(2)
    hidden = rng.normal(size=(2, 6, HIDDEN)).astype("float32")
    table = rng.normal(size=(VOCABULARY, HIDDEN)).astype("float32")
    labels = rng.integers(0, VOCABULARY, size=(2, 6))
    loss = linear_cross_entropy(tf.cast(hidden, "bfloat16"), table, labels)
    assert loss.dtype == tf.float32
    expected = reference(hidden, table, labels, np.ones((2, 6)), 0.0)[0]
    np.testing.assert_allclose(loss, expected, rtol=0.03, atol=0.03)


def test_the_compiled_step_holds_no_tokens_by_vocabulary_tensor():
    """XLA's optimized HLO of the loss and its gradients at 8 x 1,024 tokens
    and 4,096 words: no tensor holds as many elements as the whole logits."""
    batch, seq, vocabulary = 8, 1024, 4096
    chunk = default_chunk_size(vocabulary)
    assert chunk < batch * seq
    hidden = tf.Variable(tf.zeros((batch, seq, 16)))
    table = tf.Variable(tf.zeros((vocabulary, 16)))

    @tf.function(jit_compile=True)
    def step(labels):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(linear_cross_entropy(hidden, table, labels))
        return loss, tape.gradient(loss, [hidden, table])

    labels = tf.zeros((batch, seq), tf.int32)
    hlo = step.experimental_get_compiler_ir(labels)(stage="optimized_hlo")
    shapes = re.findall(r"\b(?:f32|bf16)\[([\d,]+)\]", hlo)
    largest = max(int(np.prod([int(d) for d in s.split(",")])) for s in shapes)
    assert largest < batch * seq * vocabulary, largest
    assert largest >= chunk * vocabulary  # one chunk's logits: the kernel ran


def test_docstring_example_runs():
    globs = {"np": np, "keras": keras}
    result = doctest.testmod(kernel_module, extraglobs=globs)
    assert result.attempted > 0 and result.failed == 0

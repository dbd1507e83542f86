import doctest

import numpy as np
import pytest
import tensorflow as tf

from keras_tfm.layers import MultiHeadSelfAttention, attention_kernel
from keras_tfm.layers import multi_head_self_attention as mhsa_module
from keras_tfm.layers.attention_kernel import (
    chunked_dot_product_attention,
    dot_product_attention,
)


def _inputs(seed, batch, q_len, k_len, num_heads, kv_heads, head_dim):
    rng = np.random.default_rng(seed)

    def normal(*shape):
        return tf.constant(rng.normal(size=shape).astype("float32"))

    query = normal(batch, q_len, num_heads, head_dim)
    key = normal(batch, k_len, kv_heads, head_dim)
    value = normal(batch, k_len, kv_heads, head_dim)
    key_mask = rng.random((batch, k_len)) > 0.3
    general = rng.random((batch, q_len, k_len)) > 0.2
    return query, key, value, key_mask, general


def _with_gradients(fn, tensors):
    with tf.GradientTape() as tape:
        tape.watch(tensors)
        out = fn(*tensors)
        # A non-linear loss, so the upstream gradient differs per element.
        loss = tf.reduce_sum(tf.sin(3.0 * out) * out)
    return [out.numpy()] + [g.numpy() for g in tape.gradient(loss, tensors)]


def _plain_mask(key_mask, general, causal, q_len, k_len):
    mask = np.ones((1, q_len, k_len), bool)
    if key_mask is not None:
        mask = mask & key_mask[:, None, :]
    if general is not None:
        mask = mask & general
    if causal:
        mask = mask & np.tril(np.ones((q_len, k_len), bool), k_len - q_len)[None]
    return mask


CASES = [
    # seed, batch, q_len, k_len, heads, kv_heads, head_dim, chunk, key, general, causal
    (0, 2, 9, 9, 2, 2, 4, 4, True, False, True),  # 9 is not a multiple of 4
    (1, 1, 7, 13, 4, 2, 8, 5, True, True, False),  # grouped, cross lengths
    (2, 3, 16, 16, 4, 1, 4, 16, False, False, True),  # one chunk exactly
    (3, 2, 5, 11, 2, 2, 6, 32, True, False, False),  # chunk longer than keys
    (4, 2, 12, 12, 3, 3, 4, 1, True, True, True),  # one key per chunk
    (5, 1, 6, 20, 2, 1, 8, 7, False, True, True),  # causal with k_len > q_len
]


@pytest.mark.parametrize("case", CASES)
def test_equals_plain_attention_with_gradients(case):
    seed, batch, q_len, k_len, heads, kv_heads, head_dim = case[:7]
    chunk, use_key, use_general, causal = case[7:]
    query, key, value, key_mask, general = _inputs(
        seed, batch, q_len, k_len, heads, kv_heads, head_dim
    )
    key_mask = key_mask if use_key else None
    general = general if use_general else None
    mask = _plain_mask(key_mask, general, causal, q_len, k_len)
    scale = 1.0 / np.sqrt(head_dim)
    expected = _with_gradients(
        lambda q, k, v: dot_product_attention(q, k, v, mask=mask, scale=scale)[0],
        [query, key, value],
    )
    actual = _with_gradients(
        lambda q, k, v: chunked_dot_product_attention(
            q,
            k,
            v,
            key_mask=key_mask,
            use_causal_mask=causal,
            mask=general,
            scale=scale,
            chunk_size=chunk,
        ),
        [query, key, value],
    )
    for name, a, e in zip(["outputs", "dq", "dk", "dv"], actual, expected, strict=True):
        assert a.shape == e.shape, name
        np.testing.assert_allclose(a, e, atol=2e-5, rtol=1e-5, err_msg=name)


def test_fully_masked_rows_are_zero_and_finite():
    query, key, value, key_mask, _ = _inputs(0, 2, 6, 10, 2, 2, 4)
    key_mask[1] = False  # batch row 1: no key at all
    general = np.ones((2, 6, 10), bool)
    general[0, 2] = False  # one query of row 0 sees nothing
    tensors = [query, key, value]
    out, dq, dk, dv = _with_gradients(
        lambda q, k, v: chunked_dot_product_attention(
            q, k, v, key_mask=key_mask, mask=general, chunk_size=3
        ),
        tensors,
    )
    for array in (out, dq, dk, dv):
        assert np.isfinite(array).all()
    np.testing.assert_array_equal(out[1], 0.0)
    np.testing.assert_array_equal(out[0, 2], 0.0)
    np.testing.assert_array_equal(dq[1], 0.0)
    np.testing.assert_array_equal(dk[1], 0.0)
    assert np.abs(out[0, 3]).max() > 0  # the other rows are not zeroed
    mask = _plain_mask(key_mask, general, False, 6, 10)
    plain = dot_product_attention(query, key, value, mask=mask)[0].numpy()
    np.testing.assert_allclose(out, plain, atol=1e-6)


def test_xla_compiled_forward_and_backward_equal_eager():
    query, key, value, key_mask, _ = _inputs(6, 2, 10, 10, 2, 1, 4)
    tensors = [query, key, value]

    def fn(q, k, v):
        return chunked_dot_product_attention(
            q, k, v, key_mask=key_mask, use_causal_mask=True, chunk_size=4
        )

    eager = _with_gradients(fn, tensors)
    compiled = tf.function(lambda: _with_gradients_graph(fn, tensors), jit_compile=True)
    for a, e in zip(compiled(), eager, strict=True):
        np.testing.assert_allclose(a.numpy(), e, atol=1e-5)


def _with_gradients_graph(fn, tensors):
    with tf.GradientTape() as tape:
        tape.watch(tensors)
        out = fn(*tensors)
        loss = tf.reduce_sum(tf.sin(3.0 * out) * out)
    return [out] + tape.gradient(loss, tensors)


def test_bfloat16_inputs_stay_close_to_float32():
    query, key, value, key_mask, _ = _inputs(7, 1, 8, 8, 2, 2, 8)
    low = [tf.cast(t, "bfloat16") for t in (query, key, value)]
    out = chunked_dot_product_attention(*low, key_mask=key_mask, chunk_size=3)
    assert out.dtype == tf.bfloat16
    reference = chunked_dot_product_attention(
        query, key, value, key_mask=key_mask, chunk_size=3
    )
    np.testing.assert_allclose(
        tf.cast(out, "float32").numpy(), reference.numpy(), atol=5e-2
    )


@pytest.mark.parametrize("chunk_size", [0, -2, 2.5, True])
def test_bad_chunk_size(chunk_size):
    query, key, value, _, _ = _inputs(0, 1, 3, 3, 1, 1, 2)
    with pytest.raises(ValueError, match="chunk_size"):
        chunked_dot_product_attention(query, key, value, chunk_size=chunk_size)


@pytest.mark.parametrize("causal", [False, True])
def test_layer_switches_to_chunked_path_for_long_inputs(monkeypatch, causal):
    length = attention_kernel.CHUNKED_ATTENTION_MIN_LENGTH + 5
    calls = []

    def spy(*args, **kwargs):
        calls.append(kwargs)
        return chunked_dot_product_attention(*args, **kwargs)

    monkeypatch.setattr(mhsa_module, "chunked_dot_product_attention", spy)
    layer = MultiHeadSelfAttention(num_heads=2)
    rng = np.random.default_rng(0)
    x = tf.constant(rng.normal(size=(2, length, 8)).astype("float32"))
    padding = np.ones((2, length), "int32")
    padding[1, length - 300 :] = 0
    kwargs = {"padding_mask": padding, "use_causal_mask": causal}

    def run(scores):
        with tf.GradientTape() as tape:
            tape.watch(x)
            out = layer(x, return_attention_scores=scores, **kwargs)
            out = out[0] if scores else out
            loss = tf.reduce_sum(tf.sin(out))
        grads = tape.gradient(loss, [x] + layer.trainable_weights)
        return [out.numpy()] + [g.numpy() for g in grads]

    chunked = run(scores=False)
    assert len(calls) == 1 and calls[0]["use_causal_mask"] == causal
    plain = run(scores=True)  # asking for the weights forces the plain path
    assert len(calls) == 1
    for a, e in zip(chunked, plain, strict=True):
        np.testing.assert_allclose(a, e, atol=1e-4, rtol=1e-4)


def test_short_inputs_and_cache_keep_the_plain_path(monkeypatch):
    calls = []
    monkeypatch.setattr(
        mhsa_module, "chunked_dot_product_attention", lambda *a, **k: calls.append(1)
    )
    layer = MultiHeadSelfAttention(num_heads=2, dropout=0.5)
    x = np.ones((1, 16, 8), "float32")
    layer(x)
    long_x = np.ones((1, attention_kernel.CHUNKED_ATTENTION_MIN_LENGTH, 8), "float32")
    layer(long_x, training=True)  # active attention dropout needs the weights
    assert calls == []


def test_docstring_example_runs():
    result = doctest.testmod(
        attention_kernel, extraglobs={"np": np}, optionflags=doctest.ELLIPSIS
    )
    assert result.attempted > 0 and result.failed == 0

import doctest

import numpy as np
import pytest
import tensorflow as tf

from keras_tfm.kernels import chunked_attention
from keras_tfm.kernels.chunked_attention import chunked_dot_product_attention
from keras_tfm.kernels.plain_attention import (
    plain_dot_product_attention as dot_product_attention,
)
from keras_tfm.layers import AttentionCache, DecoderBlock, MultiHeadSelfAttention


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


def _loss(out):
    # A non-linear loss, so the upstream gradient differs per element.
    return tf.reduce_sum(tf.sin(3.0 * out) * out)


def _with_gradients(fn, tensors):
    with tf.GradientTape() as tape:
        tape.watch(tensors)
        out = fn(*tensors)
        loss = _loss(out)
    return [out] + tape.gradient(loss, tensors)


def _numpy(tensors):
    return [np.asarray(t) for t in tensors]


def _plain_mask(key_mask, general, causal, q_len, k_len, causal_start):
    mask = np.ones((1, q_len, k_len), bool)
    if key_mask is not None:
        mask = mask & key_mask[:, None, :]
    if general is not None:
        mask = mask & general
    if causal:
        mask = mask & np.tril(np.ones((q_len, k_len), bool), causal_start)[None]
    return mask


def _random_case(seed):
    """Random shapes, tiles and masks; lengths mostly not multiples of a tile."""
    rng = np.random.default_rng(1000 + seed)
    kv_heads = int(rng.choice([1, 2]))
    q_len, k_len = (int(n) for n in rng.integers(1, 24, size=2))
    causal = bool(rng.random() < 0.5)
    return dict(
        seed=seed,
        batch=int(rng.integers(1, 4)),
        q_len=q_len,
        k_len=k_len if rng.random() < 0.6 else q_len,
        heads=kv_heads * int(rng.choice([1, 2, 3])),
        kv_heads=kv_heads,
        head_dim=int(rng.choice([2, 4, 8])),
        query_chunk=int(rng.integers(1, 9)),
        chunk=int(rng.integers(1, 9)),
        use_key=bool(rng.random() < 0.6),
        use_general=bool(rng.random() < 0.3),
        causal=causal,
        causal_start=None if rng.random() < 0.5 else int(rng.integers(-3, 4)),
    )


CASES = [_random_case(seed) for seed in range(10)] + [
    # Edge cases: one tile exactly, tiles longer than the lengths, one
    # key per tile, GQA with causal k_len > q_len.
    dict(seed=20, batch=3, q_len=16, k_len=16, heads=4, kv_heads=1, head_dim=4,
         query_chunk=16, chunk=16, use_key=False, use_general=False, causal=True,
         causal_start=0),
    dict(seed=21, batch=2, q_len=5, k_len=11, heads=2, kv_heads=2, head_dim=6,
         query_chunk=32, chunk=32, use_key=True, use_general=False, causal=False,
         causal_start=None),
    dict(seed=22, batch=2, q_len=12, k_len=12, heads=3, kv_heads=3, head_dim=4,
         query_chunk=1, chunk=2, use_key=True, use_general=True, causal=True,
         causal_start=0),
    dict(seed=23, batch=1, q_len=6, k_len=20, heads=4, kv_heads=2, head_dim=8,
         query_chunk=4, chunk=7, use_key=False, use_general=True, causal=True,
         causal_start=None),
    # A chunk of queries shorter than a tile, inside a longer cache (the
    # prefill after a cached prefix): a tile of just those queries.
    dict(seed=24, batch=1, q_len=4, k_len=20, heads=4, kv_heads=2, head_dim=8,
         query_chunk=16, chunk=8, use_key=False, use_general=False, causal=True,
         causal_start=9),
]  # fmt: skip


def _case_tensors(case):
    query, key, value, key_mask, general = _inputs(
        case["seed"], case["batch"], case["q_len"], case["k_len"], case["heads"],
        case["kv_heads"], case["head_dim"],
    )  # fmt: skip
    key_mask = key_mask if case["use_key"] else None
    general = general if case["use_general"] else None
    start = case["causal_start"]
    start = case["k_len"] - case["q_len"] if start is None else start
    mask = _plain_mask(
        key_mask, general, case["causal"], case["q_len"], case["k_len"], start
    )
    return [query, key, value], key_mask, general, mask


def _chunked(case, key_mask, general, **kwargs):
    def fn(q, k, v):
        return chunked_dot_product_attention(
            q,
            k,
            v,
            key_mask=key_mask,
            use_causal_mask=case["causal"],
            mask=general,
            scale=1.0 / np.sqrt(case["head_dim"]),
            chunk_size=case["chunk"],
            query_chunk_size=case["query_chunk"],
            causal_start=case["causal_start"],
            **kwargs,
        )

    return fn


def _plain(case, mask):
    def fn(q, k, v):
        scale = 1.0 / np.sqrt(case["head_dim"])
        return dot_product_attention(q, k, v, mask=mask, scale=scale)[0]

    return fn


def _assert_close(actual, expected, atol=2e-5):
    names = ["outputs", "d_query", "d_key", "d_value"]
    for name, a, e in zip(names, _numpy(actual), _numpy(expected), strict=True):
        assert a.shape == e.shape, name
        np.testing.assert_allclose(a, e, atol=atol, rtol=1e-5, err_msg=name)


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"seed{c['seed']}")
def test_equals_plain_attention_with_gradients(case):
    tensors, key_mask, general, mask = _case_tensors(case)
    expected = _with_gradients(_plain(case, mask), tensors)
    # In a graph: the same ops as eagerly (see the XLA test), faster loops.
    actual = tf.function(_with_gradients)(_chunked(case, key_mask, general), tensors)
    _assert_close(actual, expected)
    # The run-time switch's plain branch (keys shorter than `plain_below`)
    # has its own backward pass: the same numbers.
    below = tf.function(_with_gradients)(
        _chunked(case, key_mask, general, plain_below=case["k_len"] + 1), tensors
    )
    _assert_close(below, expected)


def test_equals_a_float64_numpy_reference():
    case = CASES[-1]
    tensors, key_mask, general, mask = _case_tensors(case)
    out = _chunked(case, key_mask, general)(*tensors).numpy()
    q, k, v = (np.asarray(t, "float64") for t in tensors)
    groups = case["heads"] // case["kv_heads"]
    k, v = np.repeat(k, groups, axis=2), np.repeat(v, groups, axis=2)
    logits = np.einsum("bthd,bshd->bhts", q, k) / np.sqrt(case["head_dim"])
    logits = np.where(mask[:, None], logits, -np.inf)
    peak = np.max(logits, -1, keepdims=True)
    weights = np.where(mask[:, None], np.exp(logits - np.where(
        np.isfinite(peak), peak, 0.0)), 0.0)  # fmt: skip
    total = weights.sum(-1, keepdims=True)
    weights = np.divide(weights, total, out=np.zeros_like(weights), where=total > 0)
    expected = np.einsum("bhts,bshd->bthd", weights, v)
    np.testing.assert_allclose(out, expected, atol=2e-6)


@pytest.mark.parametrize("jit_compile", [False, True])
def test_unknown_lengths_at_trace_time(jit_compile):
    """One trace with `None` lengths serves long and short keys (both paths)."""
    case = dict(CASES[3], causal=True, causal_start=0, use_general=False)
    query, key, value, key_mask, _ = _inputs(7, 2, 23, 23, 4, 2, 4)
    spec = [tf.TensorSpec([2, None, n, 4]) for n in (4, 2, 2)]

    @tf.function(
        input_signature=spec + [tf.TensorSpec([2, None], tf.bool)],
        jit_compile=jit_compile,
    )
    def run(q, k, v, key_mask):
        fn = _chunked(
            dict(case, chunk=5, query_chunk=3, head_dim=4), key_mask, None,
            plain_below=16,
        )  # fmt: skip
        return _with_gradients(fn, [q, k, v])

    for length in (23, 9):  # above and below plain_below
        tensors = [t[:, :length] for t in (query, key, value)]
        mask = _plain_mask(key_mask[:, :length], None, True, length, length, 0)
        expected = _with_gradients(
            _plain(dict(case, head_dim=4), mask), [tf.identity(t) for t in tensors]
        )
        _assert_close(run(*tensors, key_mask[:, :length]), expected)
    assert run.experimental_get_tracing_count() == 1


def test_fully_masked_rows_are_zero_and_finite():
    query, key, value, key_mask, _ = _inputs(0, 2, 6, 10, 2, 2, 4)
    key_mask[1] = False  # batch row 1: no key at all
    general = np.ones((2, 6, 10), bool)
    general[0, 2] = False  # one query of row 0 sees nothing
    out, dq, dk, dv = _numpy(
        _with_gradients(
            lambda q, k, v: chunked_dot_product_attention(
                q, k, v, key_mask=key_mask, mask=general, chunk_size=3,
                query_chunk_size=4,
            ),
            [query, key, value],
        )
    )  # fmt: skip
    for array in (out, dq, dk, dv):
        assert np.isfinite(array).all()
    np.testing.assert_array_equal(out[1], 0.0)
    np.testing.assert_array_equal(out[0, 2], 0.0)
    np.testing.assert_array_equal(dq[1], 0.0)
    np.testing.assert_array_equal(dk[1], 0.0)
    assert np.abs(out[0, 3]).max() > 0  # the other rows are not zeroed
    mask = _plain_mask(key_mask, general, False, 6, 10, 0)
    plain = dot_product_attention(query, key, value, mask=mask)[0].numpy()
    np.testing.assert_allclose(out, plain, atol=1e-6)


def test_xla_compiled_forward_and_backward_equal_eager():
    query, key, value, key_mask, _ = _inputs(6, 2, 10, 10, 2, 1, 4)
    tensors = [query, key, value]

    def fn(q, k, v):
        return chunked_dot_product_attention(
            q, k, v, key_mask=key_mask, use_causal_mask=True, chunk_size=4,
            query_chunk_size=3,
        )  # fmt: skip

    eager = _with_gradients(fn, tensors)
    compiled = tf.function(lambda: _with_gradients(fn, tensors), jit_compile=True)
    _assert_close(compiled(), eager, atol=1e-5)


def test_bfloat16_inputs_stay_close_to_float32():
    query, key, value, key_mask, _ = _inputs(7, 1, 8, 8, 2, 2, 8)
    low = [tf.cast(t, "bfloat16") for t in (query, key, value)]
    out = chunked_dot_product_attention(
        *low, key_mask=key_mask, chunk_size=3, query_chunk_size=5
    )
    assert out.dtype == tf.bfloat16
    reference = chunked_dot_product_attention(
        query, key, value, key_mask=key_mask, chunk_size=3
    )
    np.testing.assert_allclose(
        tf.cast(out, "float32").numpy(), reference.numpy(), atol=5e-2
    )


@pytest.mark.parametrize("name", ["chunk_size", "query_chunk_size", "plain_below"])
@pytest.mark.parametrize("bad", [0, -2, 2.5, True])
def test_bad_sizes(name, bad):
    query, key, value, _, _ = _inputs(0, 1, 3, 3, 1, 1, 2)
    with pytest.raises(ValueError, match=name):
        chunked_dot_product_attention(query, key, value, **{name: bad})


def _layer_run(layer, x, scores=False, **kwargs):
    with tf.GradientTape() as tape:
        tape.watch(x)
        out = layer.call_with_scores(x, **kwargs)[0] if scores else layer(x, **kwargs)
        loss = tf.reduce_sum(tf.sin(out))
    grads = tape.gradient(loss, [x] + layer.trainable_weights)
    return [out.numpy()] + [g.numpy() for g in grads]


@pytest.mark.parametrize("causal", [False, True])
def test_layer_switches_to_chunked_path_for_long_inputs(small_tiles, causal):
    layer = MultiHeadSelfAttention(num_heads=4, num_key_value_heads=2)
    x = tf.random.stateless_normal((2, 14, 8), seed=[0, 1])
    padding = np.ones((2, 14), "int32")
    padding[1, 9:] = 0
    kwargs = {"padding_mask": padding, "use_causal_mask": causal}
    chunked = _layer_run(layer, x, **kwargs)
    assert len(small_tiles) == 1 and small_tiles[0]["use_causal_mask"] == causal
    # Asking for the weights forces the plain path.
    plain = _layer_run(layer, x, scores=True, **kwargs)
    assert len(small_tiles) == 1
    for a, e in zip(chunked, plain, strict=True):
        np.testing.assert_allclose(a, e, atol=1e-5, rtol=1e-5)
    layer(x[:, :11], padding_mask=padding[:, :11])  # short: the plain path
    assert len(small_tiles) == 1


@pytest.mark.parametrize("jit_compile", [False, True])
def test_layer_with_unknown_length_chooses_when_run(small_tiles, jit_compile):
    layer = MultiHeadSelfAttention(num_heads=2)
    x = tf.random.stateless_normal((2, 14, 8), seed=[0, 2])
    layer(x)
    padding = np.ones((2, 14), bool)
    padding[0, 10:] = False

    spec = [tf.TensorSpec([2, None, 8]), tf.TensorSpec([2, None], tf.bool)]

    @tf.function(input_signature=spec, jit_compile=jit_compile)
    def run(x, padding):
        with tf.GradientTape() as tape:
            tape.watch(x)
            out = layer(x, padding_mask=padding, use_causal_mask=True)
            loss = tf.reduce_sum(tf.sin(out))
        return [out] + tape.gradient(loss, [x] + layer.trainable_weights)

    for length in (14, 8):
        inputs = x[:, :length]
        actual = _numpy(run(inputs, padding[:, :length]))
        expected = _layer_run(
            layer, inputs, padding_mask=padding[:, :length], use_causal_mask=True,
            scores=True,
        )  # fmt: skip
        for a, e in zip(actual, expected, strict=True):
            np.testing.assert_allclose(a, e, atol=1e-5, rtol=1e-5)
    assert small_tiles[-1]["plain_below"] == 12  # the traced call


def test_cross_attention_uses_the_chunked_path(small_tiles):
    layer = MultiHeadSelfAttention(num_heads=2)
    x = tf.random.stateless_normal((2, 7, 8), seed=[0, 3])
    context = tf.random.stateless_normal((2, 13, 6), seed=[0, 4])
    context_mask = np.ones((2, 13), bool)
    context_mask[1, 5:] = False

    def run(scores):
        with tf.GradientTape() as tape:
            tape.watch([x, context])
            call = layer.call_with_scores if scores else layer
            out = call(x, context=context, context_padding_mask=context_mask)
            out = out[0] if scores else out
            loss = tf.reduce_sum(tf.sin(out))
        return _numpy([out] + tape.gradient(loss, [x, context]))

    chunked = run(False)
    assert len(small_tiles) == 1
    for a, e in zip(chunked, run(True), strict=True):
        np.testing.assert_allclose(a, e, atol=1e-5, rtol=1e-5)


def test_decoder_block_prefill_uses_the_chunked_path(small_tiles):
    """A cache written at index 0 (generate's prompt pass) is tiled too."""
    block = DecoderBlock(num_heads=2, intermediate_dim=16)
    x = tf.random.stateless_normal((2, 13, 8), seed=[0, 5])
    block(x)
    padding = np.ones((2, 16), bool)
    padding[1, 9:] = False  # right padding of the second prompt
    cache = block.empty_cache(2, 16)
    del small_tiles[:]
    out, cache = block(x, padding_mask=padding, cache=AttentionCache(cache, 0))
    assert len(small_tiles) == 1
    expected = block(x, padding_mask=padding[:, :13], return_attention_scores=True)[0]
    np.testing.assert_allclose(out.numpy(), expected.numpy(), atol=1e-5)
    # The next step reads the cache the prefill wrote: as an uncached pass.
    step, _ = block(x[:, :1], padding_mask=padding, cache=AttentionCache(cache, 13))
    longer = tf.concat([x, x[:, :1]], axis=1)
    full = block(longer, padding_mask=padding[:, :14], return_attention_scores=True)
    np.testing.assert_allclose(step.numpy(), full[0][:, 13:].numpy(), atol=1e-5)


def test_short_inputs_dropout_and_decoding_steps_keep_the_plain_path(small_tiles):
    layer = MultiHeadSelfAttention(num_heads=2, dropout=0.5)
    layer(np.ones((1, 8, 8), "float32"))
    layer(np.ones((1, 16, 8), "float32"), training=True)  # dropout needs weights
    cache = layer.empty_cache(1, 16)
    layer(np.ones((1, 1, 8), "float32"), cache=AttentionCache(cache, 3))
    assert small_tiles == []


def test_docstring_example_runs():
    result = doctest.testmod(
        chunked_attention,
        extraglobs={"np": np, "plain_dot_product_attention": dot_product_attention},
        optionflags=doctest.ELLIPSIS,
    )
    assert result.attempted > 0 and result.failed == 0

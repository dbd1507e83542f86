import keras
import numpy as np
import pytest
import tensorflow as tf
from keras import ops

from keras_tfm.layers import AttentionCache, MultiHeadSelfAttention, TokenEmbedding
from tests.layers import numpy_reference as ref
from tests.layers.layer_harness import (
    assert_dropout_reaches_every_sublayer,
    randomize_weights,
    run_layer_test,
)

RNG = np.random.default_rng(0)
BATCH, Q_LEN, K_LEN, DIM, CONTEXT_DIM = 2, 5, 7, 8, 6


def _x(*shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


def _built(context=False, seed=0, **kwargs):
    kwargs.setdefault("num_heads", 2)
    layer = MultiHeadSelfAttention(**kwargs)
    if context:
        layer(_x(1, 2, DIM), context=_x(1, 3, CONTEXT_DIM))
    else:
        layer(_x(1, 2, DIM))
    randomize_weights(layer, seed=seed)
    return layer


def reference_weights(layer):
    weights = {
        "wq": layer.query_dense.kernel,
        "bq": layer.query_dense.bias,
        "wkv": layer.key_value_dense.kernel,
        "bkv": layer.key_value_dense.bias,
        "wo": layer.output_dense.kernel,
        "bo": layer.output_dense.bias,
    }
    return {name: np.asarray(w, np.float64) for name, w in weights.items()}


def reference(layer, x, context=None, mask=None, rotary=False):
    out, weights = ref.attention(
        x,
        x if context is None else context,
        reference_weights(layer),
        layer.num_heads,
        layer.effective_num_key_value_heads,
        layer.effective_head_dim,
        mask=mask,
        rotary_positions=rotary,
    )
    return out, weights


def random_padding(batch, length, seed):
    lengths = np.random.default_rng(seed).integers(1, length + 1, size=batch)
    lengths[0] = length - 2
    return (np.arange(length)[None] < lengths[:, None]).astype("int32")


# Numerics against the float64 NumPy reference.


@pytest.mark.parametrize("num_key_value_heads", [None, 1])
@pytest.mark.parametrize("mask_kind", ["none", "padding", "causal", "general", "all"])
def test_self_attention_matches_reference(mask_kind, num_key_value_heads):
    layer = _built(num_heads=4, num_key_value_heads=num_key_value_heads)
    x = _x(BATCH, Q_LEN, DIM, seed=1)
    padding = random_padding(BATCH, Q_LEN, seed=2)
    general = np.random.default_rng(3).random((BATCH, Q_LEN, Q_LEN)) > 0.3
    causal = np.tril(np.ones((Q_LEN, Q_LEN), bool))[None]
    kwargs, mask = {}, np.ones((BATCH, Q_LEN, Q_LEN), bool)
    if mask_kind in ("padding", "all"):
        kwargs["padding_mask"] = padding
        mask &= padding[:, None, :].astype(bool)
    if mask_kind in ("causal", "all"):
        kwargs["use_causal_mask"] = True
        mask &= causal
    if mask_kind in ("general", "all"):
        kwargs["attention_mask"] = general
        mask &= general
    out, weights = layer.call_with_scores(x, **kwargs)
    expected_out, expected_weights = reference(layer, x, mask=mask)
    np.testing.assert_allclose(np.asarray(out), expected_out, atol=1e-5, rtol=0)
    np.testing.assert_allclose(np.asarray(weights), expected_weights, atol=1e-5, rtol=0)


@pytest.mark.parametrize("with_mask", [False, True])
def test_cross_attention_matches_reference(with_mask):
    layer = _built(context=True, num_heads=2, num_key_value_heads=1)
    x, context = _x(BATCH, Q_LEN, DIM, seed=1), _x(BATCH, K_LEN, CONTEXT_DIM, seed=2)
    context_padding = random_padding(BATCH, K_LEN, seed=3)
    kwargs = {"context_padding_mask": context_padding} if with_mask else {}
    mask = np.broadcast_to(
        context_padding[:, None, :].astype(bool) if with_mask else True,
        (BATCH, Q_LEN, K_LEN),
    )
    out = layer(x, context=context, **kwargs)
    expected, _ = reference(layer, x, context, mask=mask)
    np.testing.assert_allclose(np.asarray(out), expected, atol=1e-5, rtol=0)


def test_rotary_attention_matches_reference():
    layer = _built(num_heads=2, use_rotary=True)
    x = _x(BATCH, Q_LEN, DIM, seed=4)
    expected, _ = reference(layer, x, rotary=True)
    np.testing.assert_allclose(np.asarray(layer(x)), expected, atol=1e-5, rtol=0)


def test_query_key_norm_matches_reference():
    layer = _built(
        num_heads=4, num_key_value_heads=2, head_dim=6, use_rotary=True,
        query_key_norm=True, layer_norm_epsilon=1e-3,
    )  # fmt: skip
    norms = [w for w in layer.weights if "_norm/" in w.path]
    assert [w.path.split("/", 1)[1] for w in norms] == [
        "query_norm/scale",
        "key_norm/scale",
    ]
    assert all(tuple(w.shape) == (6,) for w in norms)
    x = _x(BATCH, Q_LEN, DIM, seed=4)
    scales = (
        np.asarray(layer.query_norm.scale, np.float64),
        np.asarray(layer.key_norm.scale, np.float64),
        1e-3,
    )
    out, weights = layer.call_with_scores(x, use_causal_mask=True)
    mask = np.broadcast_to(
        np.tril(np.ones((Q_LEN, Q_LEN), bool)), (BATCH, Q_LEN, Q_LEN)
    )
    expected, expected_weights = ref.attention(
        x, x, reference_weights(layer), 4, 2, 6, mask=mask,
        rotary_positions=True, query_key_norm=scales,
    )  # fmt: skip
    np.testing.assert_allclose(np.asarray(out), expected, atol=1e-5, rtol=0)
    np.testing.assert_allclose(np.asarray(weights), expected_weights, atol=1e-5)
    # The norms matter: without them the outputs differ.
    plain, _ = ref.attention(
        x, x, reference_weights(layer), 4, 2, 6, mask=mask, rotary_positions=True
    )
    assert np.abs(plain - expected).max() > 1e-2


def test_attention_logit_soft_cap_matches_reference():
    layer = _built(num_heads=2, use_rotary=True, attention_logit_soft_cap=0.5)
    x = _x(BATCH, Q_LEN, DIM, seed=5) * 3
    mask = np.broadcast_to(
        np.tril(np.ones((Q_LEN, Q_LEN), bool)), (BATCH, Q_LEN, Q_LEN)
    )
    out, weights = layer.call_with_scores(x, use_causal_mask=True)
    args = (x, x, reference_weights(layer), 2, 2, 4)
    expected, expected_weights = ref.attention(
        *args, mask=mask, rotary_positions=True, logit_soft_cap=0.5
    )
    np.testing.assert_allclose(np.asarray(out), expected, atol=1e-5, rtol=0)
    np.testing.assert_allclose(np.asarray(weights), expected_weights, atol=1e-5)
    uncapped, _ = ref.attention(*args, mask=mask, rotary_positions=True)
    assert np.abs(uncapped - expected).max() > 1e-2  # the cap is applied
    with pytest.raises(ValueError, match="attention_logit_soft_cap"):
        MultiHeadSelfAttention(num_heads=2, attention_logit_soft_cap=-1.0)


def test_explicit_head_dim():
    layer = _built(num_heads=3, head_dim=5)
    assert layer.query_dense.kernel.shape == (DIM, 15)
    x = _x(BATCH, Q_LEN, DIM)
    expected, _ = reference(layer, x)
    np.testing.assert_allclose(np.asarray(layer(x)), expected, atol=1e-5, rtol=0)


# Masks: what must not matter does not.


def test_changing_padded_tokens_leaves_real_positions_unchanged():
    layer = _built()
    x = _x(BATCH, Q_LEN, DIM, seed=1)
    padding = random_padding(BATCH, Q_LEN, seed=5)
    perturbed = np.where(padding[..., None] == 1, x, _x(BATCH, Q_LEN, DIM, seed=9))
    out = np.asarray(layer(x, padding_mask=padding))
    out_perturbed = np.asarray(layer(perturbed, padding_mask=padding))
    real = padding.astype(bool)
    np.testing.assert_allclose(out[real], out_perturbed[real], atol=1e-6)
    # Without the mask the perturbation does leak: the test can fail.
    assert (
        np.abs(np.asarray(layer(x))[real] - np.asarray(layer(perturbed))[real]).max()
        > 1e-3
    )


def test_changing_padded_context_leaves_outputs_unchanged():
    layer = _built(context=True)
    x, context = _x(BATCH, Q_LEN, DIM, seed=1), _x(BATCH, K_LEN, CONTEXT_DIM, seed=2)
    padding = random_padding(BATCH, K_LEN, seed=6)
    perturbed = np.where(padding[..., None] == 1, context, 5.0).astype("float32")
    np.testing.assert_allclose(
        np.asarray(layer(x, context=context, context_padding_mask=padding)),
        np.asarray(layer(x, context=perturbed, context_padding_mask=padding)),
        atol=1e-6,
    )


def test_causal_outputs_ignore_the_future():
    layer = _built()
    x = _x(BATCH, Q_LEN, DIM, seed=1)
    for t in range(Q_LEN - 1):
        future = x.copy()
        future[:, t + 1 :] = _x(BATCH, Q_LEN - t - 1, DIM, seed=10 + t)
        np.testing.assert_allclose(
            np.asarray(layer(x, use_causal_mask=True))[:, : t + 1],
            np.asarray(layer(future, use_causal_mask=True))[:, : t + 1],
            atol=1e-6,
        )


def test_implicit_keras_mask_equals_explicit_padding_mask():
    ids = np.array([[4, 9, 3, 0, 0], [7, 0, 0, 0, 0]])
    embedding = TokenEmbedding(12, DIM, mask_zero=True)
    layer = _built()
    embedded = embedding(ids)
    assert embedded._keras_mask is not None
    plain = ops.convert_to_tensor(np.asarray(embedded))
    implicit = np.asarray(layer(embedded))
    explicit = np.asarray(layer(plain, padding_mask=ids != 0))
    np.testing.assert_array_equal(implicit, explicit)
    assert np.abs(implicit - np.asarray(layer(plain))).max() > 1e-3


def test_implicit_mask_in_a_functional_model():
    ids = np.array([[4, 9, 3, 0, 0], [7, 0, 0, 0, 0]])
    inputs = keras.Input((None,), dtype="int32")
    embedding = TokenEmbedding(12, DIM, mask_zero=True)
    attention = MultiHeadSelfAttention(num_heads=2)
    model = keras.Model(inputs, attention(embedding(inputs)))
    explicit = attention(
        ops.convert_to_tensor(np.asarray(embedding(ids))), padding_mask=ids != 0
    )
    np.testing.assert_array_equal(np.asarray(model(ids)), np.asarray(explicit))


def test_fully_masked_query_rows_are_finite_and_get_zero_weights():
    layer = _built()
    x = _x(BATCH, Q_LEN, DIM)
    mask = np.ones((BATCH, Q_LEN, Q_LEN), bool)
    mask[0, 2] = False
    out, weights = layer.call_with_scores(x, attention_mask=mask)
    out, weights = np.asarray(out), np.asarray(weights)
    assert np.isfinite(out).all()
    np.testing.assert_array_equal(weights[0, :, 2], 0.0)
    np.testing.assert_allclose(
        out[0, 2], np.asarray(layer.output_dense.bias), atol=1e-6
    )
    all_padding = layer(x, padding_mask=np.zeros((BATCH, Q_LEN), "int32"))
    assert np.isfinite(np.asarray(all_padding)).all()


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision_is_finite_and_close(policy):
    x = _x(BATCH, Q_LEN, DIM, seed=1) * 30.0  # large logits
    mask = np.ones((BATCH, Q_LEN, Q_LEN), bool)
    mask[1, 0] = False
    reference_layer = _built(num_heads=2)
    expected = np.asarray(reference_layer(x, attention_mask=mask, use_causal_mask=True))
    keras.config.set_dtype_policy(policy)
    layer = _built(num_heads=2)
    layer.set_weights(reference_layer.get_weights())
    out, weights = layer.call_with_scores(x, attention_mask=mask, use_causal_mask=True)
    assert weights.dtype == "float32"  # the softmax ran in float32
    out = np.asarray(ops.cast(out, "float32"))
    assert np.isfinite(out).all()
    scale = np.abs(expected).max()
    assert np.abs(out - expected).max() / scale < 3e-2


# Key/value cache.


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"num_heads": 4, "num_key_value_heads": 2},
        {"use_rotary": True},
        {"use_rotary": True, "query_key_norm": True},
        {"use_rotary": True, "attention_logit_soft_cap": 1.0},
    ],
)
def test_cached_decoding_equals_the_full_causal_pass(kwargs):
    layer = _built(**kwargs)
    x = _x(BATCH, Q_LEN, DIM, seed=1)
    full = np.asarray(layer(x, use_causal_mask=True))
    cache = layer.empty_cache(BATCH, Q_LEN + 2)
    steps = []
    for t in range(Q_LEN):
        out, cache = layer(
            x[:, t : t + 1], cache=AttentionCache(cache, t), use_causal_mask=True
        )
        steps.append(np.asarray(out))
    np.testing.assert_allclose(np.concatenate(steps, axis=1), full, atol=1e-5)
    # A prefill of 3 tokens, then one step, gives the same again.
    cache = layer.empty_cache(BATCH, Q_LEN)
    first, cache = layer(x[:, :3], cache=AttentionCache(cache, 0), use_causal_mask=True)
    second, cache = layer(
        x[:, 3:], cache=AttentionCache(cache, 3), use_causal_mask=True
    )
    np.testing.assert_allclose(np.concatenate([first, second], axis=1), full, atol=1e-5)


def test_cached_decoding_honours_a_padding_mask_over_the_cache():
    layer = _built()
    x = _x(BATCH, Q_LEN, DIM, seed=1)
    padding = random_padding(BATCH, Q_LEN, seed=3)
    full = np.asarray(layer(x, padding_mask=padding, use_causal_mask=True))
    cache = layer.empty_cache(BATCH, Q_LEN)
    steps = []
    for t in range(Q_LEN):
        out, cache = layer(
            x[:, t : t + 1],
            padding_mask=padding,
            cache=AttentionCache(cache, t),
            use_causal_mask=True,
        )
        steps.append(np.asarray(out))
    np.testing.assert_allclose(np.concatenate(steps, axis=1), full, atol=1e-5)


def test_precomputed_cross_attention_cache_equals_recomputing():
    layer = _built(context=True)
    x, context = _x(BATCH, Q_LEN, DIM, seed=1), _x(BATCH, K_LEN, CONTEXT_DIM, seed=2)
    cache = layer.compute_key_value_cache(context)
    assert tuple(cache.shape) == (BATCH, 2, K_LEN, 2, DIM // 2)
    out, returned = layer(x, cache=AttentionCache(cache))
    assert returned is cache
    np.testing.assert_allclose(
        np.asarray(out), np.asarray(layer(x, context=context)), atol=1e-6
    )


def test_cached_decoding_under_jit():
    layer = _built()
    x = _x(BATCH, Q_LEN, DIM, seed=1)
    full = np.asarray(layer(x, use_causal_mask=True))

    @tf.function(jit_compile=True)
    def step(token, cache, index):
        return layer(token, cache=AttentionCache(cache, index), use_causal_mask=True)

    cache = layer.empty_cache(BATCH, Q_LEN)
    steps = []
    for t in range(Q_LEN):
        out, cache = step(x[:, t : t + 1], cache, ops.convert_to_tensor(t))
        steps.append(np.asarray(out))
    np.testing.assert_allclose(np.concatenate(steps, axis=1), full, atol=1e-5)


# Layer contract, dropout and errors.


@pytest.mark.parametrize("query_key_norm", [False, True])
def test_layer_contract_self_attention(tmp_path, query_key_norm):
    run_layer_test(
        lambda: MultiHeadSelfAttention(
            num_heads=2, num_key_value_heads=1, query_key_norm=query_key_norm
        ),
        {"inputs": _x(BATCH, Q_LEN, DIM)},
        call_kwargs={"use_causal_mask": True},
        expected_output_shape=(BATCH, Q_LEN, DIM),
        tmp_path=tmp_path,
    )


def test_layer_contract_cross_attention(tmp_path):
    run_layer_test(
        lambda: MultiHeadSelfAttention(num_heads=2, use_rotary=False),
        {"inputs": _x(BATCH, Q_LEN, DIM), "context": _x(BATCH, K_LEN, CONTEXT_DIM)},
        expected_output_shape=(BATCH, Q_LEN, DIM),
        tmp_path=tmp_path,
    )


def test_dropout_reaches_the_attention_weights():
    layer = _built(dropout=0.5)
    x = _x(BATCH, Q_LEN, DIM)
    assert_dropout_reaches_every_sublayer(
        layer, lambda training: layer(x, training=training)
    )


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"num_heads": 0}, "num_heads=0"),
        ({"num_heads": -2}, "num_heads=-2"),
        ({"num_heads": 2.0}, "num_heads=2.0"),
        ({"num_heads": 4, "num_key_value_heads": 3}, "num_key_value_heads=3"),
        ({"num_heads": 2, "head_dim": 0}, "head_dim=0"),
        ({"num_heads": 2, "dropout": 1.0}, "dropout=1.0"),
    ],
)
def test_bad_constructor_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        MultiHeadSelfAttention(**kwargs)


def test_hidden_dim_not_divisible_by_num_heads():
    with pytest.raises(ValueError, match="hidden_dim=8, num_heads=3"):
        MultiHeadSelfAttention(num_heads=3)(_x(1, 2, DIM))


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda a: a(_x(2, DIM)), r"inputs.shape=\(2, 8\)"),
        (lambda a: a(_x(2, 3, 5)), r"must be 8.*inputs.shape=\(2, 3, 5\)"),
        (
            lambda a: a(_x(2, 3, DIM), padding_mask=np.ones((2, 4))),
            r"padding_mask.shape=\(2, 4\)",
        ),
        (
            lambda a: a(_x(2, 3, DIM), padding_mask=np.ones((3,))),
            r"padding_mask.shape=\(3,\)",
        ),
        (
            lambda a: a(_x(2, 3, DIM), attention_mask=np.ones((2, 3, 4))),
            r"attention_mask.shape=\(2, 3, 4\)",
        ),
        (lambda a: a(_x(2, 3, DIM), attention_mask=np.ones((3, 3))), r"attention_mask"),
        (lambda a: a(_x(2, 3, DIM), context=_x(2, 3)), r"context.shape=\(2, 3\)"),
        (
            lambda a: a(
                _x(2, 1, DIM),
                cache=AttentionCache(np.zeros((2, 2, 4, 3, 4), "float32"), 0),
            ),
            r"cache.shape=\(2, 2, 4, 3, 4\)",
        ),
    ],
)
def test_bad_call_arguments(call, message):
    layer = _built()
    with pytest.raises(ValueError, match=message):
        call(layer)


def test_rotary_cross_attention_is_refused():
    layer = MultiHeadSelfAttention(num_heads=2, use_rotary=True)
    with pytest.raises(ValueError, match="Rotary embedding applies to self-attention"):
        layer(_x(1, 2, DIM), context=_x(1, 3, DIM))


def test_a_single_key_pass_is_plain_softmax():
    # One key: every query puts weight 1 on it (and no warning is raised).
    layer = _built()
    _, weights = layer.call_with_scores(_x(BATCH, 1, DIM))
    np.testing.assert_allclose(np.asarray(weights), 1.0, atol=1e-6)

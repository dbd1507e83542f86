import keras
import numpy as np
import pytest
import tensorflow as tf
from keras import ops

from keras_tfm.layers import AttentionCache, DecoderBlock
from tests.layers.block_reference import block as reference_block
from tests.layers.layer_harness import (
    assert_dropout_reaches_every_sublayer,
    randomize_weights,
    run_layer_test,
)

DIM, SOURCE_DIM, T, S = 8, 12, 6, 7


def _x(*shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


def _built(cross=True, seed=0, **kwargs):
    kwargs.setdefault("num_heads", 2)
    kwargs.setdefault("intermediate_dim", 16)
    layer = DecoderBlock(**kwargs)
    layer(_x(1, 2, DIM), encoder_outputs=_x(1, 3, SOURCE_DIM) if cross else None)
    randomize_weights(layer, seed=seed)
    for weight in layer.weights:
        if weight.name in ("gamma", "scale"):
            weight.assign(1.0 + 0.1 * np.asarray(weight))
    return layer


SOURCE_PADDING = np.array([[1] * S, [1] * 4 + [0] * 3])
TARGET_PADDING = np.array([[1] * T, [1] * 5 + [0]])


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"normalize_first": True, "activation": "gelu"},
        {"normalization": "rms_norm", "activation": "swiglu", "num_key_value_heads": 1},
    ],
)
def test_matches_reference_with_cross_attention(kwargs):
    layer = _built(**kwargs)
    x, source = _x(2, T, DIM, seed=1), _x(2, S, SOURCE_DIM, seed=2)
    self_mask = np.tril(np.ones((T, T), bool))[None] & TARGET_PADDING[
        :, None, :
    ].astype(bool)
    cross_mask = np.broadcast_to(SOURCE_PADDING[:, None, :].astype(bool), (2, T, S))
    out = layer(
        x,
        encoder_outputs=source,
        padding_mask=TARGET_PADDING,
        encoder_padding_mask=SOURCE_PADDING,
    )
    expected = reference_block(layer, x, self_mask, source, cross_mask)
    np.testing.assert_allclose(np.asarray(out), expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        # Gemma 2's block: sandwich norms, soft-capped attention logits,
        # GeGLU; with Qwen3's per-head query/key norms as well.
        {
            "normalization": "rms_norm", "activation": "geglu_approximate",
            "sandwich_norm": True, "attention_logit_soft_cap": 2.0,
            "query_key_norm": True, "num_key_value_heads": 1,
        },
    ],
)  # fmt: skip
def test_matches_reference_decoder_only(kwargs):
    layer = _built(cross=False, normalize_first=True, use_rotary=True, **kwargs)
    x = _x(2, T, DIM, seed=1)
    causal = np.broadcast_to(np.tril(np.ones((T, T), bool)), (2, T, T))
    np.testing.assert_allclose(
        np.asarray(layer(x)), reference_block(layer, x, causal), atol=1e-5, rtol=0
    )
    assert not hasattr(layer, "cross_attention")


def test_causality_and_source_padding():
    layer = _built()
    x, source = _x(2, T, DIM, seed=1), _x(2, S, SOURCE_DIM, seed=2)
    base = np.asarray(
        layer(x, encoder_outputs=source, encoder_padding_mask=SOURCE_PADDING)
    )
    for t in range(T - 1):
        future = x.copy()
        future[:, t + 1 :] = 3.0
        out = np.asarray(
            layer(future, encoder_outputs=source, encoder_padding_mask=SOURCE_PADDING)
        )
        np.testing.assert_allclose(out[:, : t + 1], base[:, : t + 1], atol=1e-6)
    padded_source = np.where(SOURCE_PADDING[..., None] == 1, source, -4.0).astype(
        "float32"
    )
    out = layer(x, encoder_outputs=padded_source, encoder_padding_mask=SOURCE_PADDING)
    np.testing.assert_allclose(np.asarray(out), base, atol=1e-6)


def test_implicit_source_mask_equals_explicit():
    layer = _built()
    x, source = _x(2, T, DIM, seed=1), _x(2, S, SOURCE_DIM, seed=2)
    masked_source = ops.convert_to_tensor(source)
    masked_source._keras_mask = ops.convert_to_tensor(SOURCE_PADDING.astype(bool))
    np.testing.assert_array_equal(
        np.asarray(layer(x, encoder_outputs=masked_source)),
        np.asarray(
            layer(x, encoder_outputs=source, encoder_padding_mask=SOURCE_PADDING)
        ),
    )


@pytest.mark.parametrize(
    "kwargs", [{}, {"normalize_first": True, "num_key_value_heads": 1}]
)
def test_cached_decoding_equals_the_full_pass(kwargs):
    layer = _built(**kwargs)
    x, source = _x(2, T, DIM, seed=1), _x(2, S, SOURCE_DIM, seed=2)
    full = np.asarray(
        layer(x, encoder_outputs=source, encoder_padding_mask=SOURCE_PADDING)
    )
    cross_cache = layer.compute_cross_attention_cache(source)
    cache = layer.empty_cache(2, T)

    @tf.function(jit_compile=True)
    def step(token, cache, index):
        return layer(
            token,
            encoder_padding_mask=SOURCE_PADDING,
            cache=AttentionCache(cache, index),
            cross_attention_cache=cross_cache,
        )

    steps = []
    for t in range(T):
        out, cache = step(x[:, t : t + 1], cache, ops.convert_to_tensor(t))
        steps.append(np.asarray(out))
    np.testing.assert_allclose(np.concatenate(steps, axis=1), full, atol=1e-5)


def test_cross_attention_keys_are_computed_once_per_source():
    layer = _built()
    calls = []
    dense = layer.cross_attention.key_value_dense
    original = dense.call

    def counting(inputs, *args, **kwargs):
        calls.append(inputs.shape)
        return original(inputs, *args, **kwargs)

    dense.call = counting
    try:
        source = _x(2, S, SOURCE_DIM)
        cross_cache = layer.compute_cross_attention_cache(source)
        cache = layer.empty_cache(2, T)
        for t in range(T):
            _, cache = layer(
                _x(2, 1, DIM, seed=t),
                cache=AttentionCache(cache, t),
                cross_attention_cache=cross_cache,
            )
    finally:
        del dense.call
    assert len(calls) == 1


def test_dropout_reaches_every_sublayer():
    layer = _built(dropout=0.5)
    x, source = _x(2, T, DIM), _x(2, S, SOURCE_DIM)
    assert_dropout_reaches_every_sublayer(
        layer, lambda training: layer(x, encoder_outputs=source, training=training)
    )


def test_layer_contract_with_cross_attention(tmp_path):
    run_layer_test(
        lambda: DecoderBlock(num_heads=2, intermediate_dim=16),
        {
            "inputs": _x(2, T, DIM),
            "encoder_outputs": _x(2, S, SOURCE_DIM),
            "encoder_padding_mask": SOURCE_PADDING,
        },
        expected_output_shape=(2, T, DIM),
        tmp_path=tmp_path,
    )


def test_layer_contract_decoder_only(tmp_path):
    run_layer_test(
        lambda: DecoderBlock(num_heads=2, intermediate_dim=16, normalize_first=True),
        {"inputs": _x(2, T, DIM)},
        expected_output_shape=(2, T, DIM),
        tmp_path=tmp_path,
    )


def test_sandwich_norm_needs_a_pre_ln_block():
    with pytest.raises(ValueError, match="normalize_first=True"):
        DecoderBlock(num_heads=2, intermediate_dim=8, sandwich_norm=True)


def test_misuse_is_refused():
    decoder_only = _built(cross=False)
    with pytest.raises(ValueError, match="built without cross-attention"):
        decoder_only(_x(1, 2, DIM), encoder_outputs=_x(1, 3, SOURCE_DIM))
    with pytest.raises(ValueError, match="built without cross-attention"):
        decoder_only.compute_cross_attention_cache(_x(1, 3, SOURCE_DIM))
    encoder_decoder = _built()
    with pytest.raises(ValueError, match="pass `encoder_outputs`"):
        encoder_decoder(_x(1, 2, DIM))
    with pytest.raises(ValueError, match="with an `update_index`.*Received: cache"):
        encoder_decoder(_x(1, 1, DIM), cache=encoder_decoder.empty_cache(1, 4))
    with pytest.raises(ValueError, match="with an `update_index`"):
        cache = AttentionCache(encoder_decoder.empty_cache(1, 4))  # read-only
        encoder_decoder(_x(1, 1, DIM), cache=cache)
    with pytest.raises(ValueError, match=r"encoder_padding_mask|context_padding_mask"):
        encoder_decoder(
            _x(2, 2, DIM),
            encoder_outputs=_x(2, 3, SOURCE_DIM),
            encoder_padding_mask=np.ones((2, 4)),
        )
    with pytest.raises(ValueError, match=r"context.shape=\(1, 3, 5\)"):
        encoder_decoder(_x(1, 2, DIM), encoder_outputs=_x(1, 3, 5))


def test_a_saved_model_keeps_its_cross_attention(tmp_path):
    target = keras.Input((None, DIM))
    source = keras.Input((None, SOURCE_DIM))
    model = keras.Model(
        [target, source], DecoderBlock(2, 16)(target, encoder_outputs=source)
    )
    x, s = _x(2, T, DIM), _x(2, S, SOURCE_DIM)
    model.save(tmp_path / "decoder.keras")
    loaded = keras.models.load_model(tmp_path / "decoder.keras")
    assert loaded.layers[-1].has_cross_attention
    np.testing.assert_array_equal(np.asarray(loaded([x, s])), np.asarray(model([x, s])))

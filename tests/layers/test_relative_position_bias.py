"""T5's pieces as options of the layers, each against float64 NumPy written
from T5's formulas (Raffel et al., 2020; transformers' modeling_t5.py), not
from the code under test: the bucket function (and hand-computed buckets,
and transformers' own table), the bias layer, unscaled attention with an
additive bias, the RMS norm, and the blocks' pre-norm T5 recipe."""

import math

import keras
import numpy as np
import pytest

from keras_tfm.layers import (
    DecoderBlock,
    MultiHeadSelfAttention,
    RelativePositionBias,
    TransformerEncoderBlock,
)
from keras_tfm.layers.relative_position_bias import relative_position_bucket
from keras_tfm.layers.transformer_block import BLOCK_ARGUMENTS
from tests.convert.decoder_checks import FIXTURES
from tests.layers.numpy_reference import feed_forward, rms_norm, softmax


def bucket_reference(relative, bidirectional, num_buckets, max_distance):
    """T5's bucket of one `key - query` distance, in float64 Python."""
    bucket, n = 0, num_buckets
    if bidirectional:
        n //= 2
        bucket += n if relative > 0 else 0
        distance = abs(relative)
    else:
        distance = max(-relative, 0)
    exact = n // 2
    if distance < exact:
        return bucket + distance
    scaled = math.log(distance / exact) / math.log(max_distance / exact)
    return bucket + min(n - 1, exact + int(scaled * (n - exact)))


# T5's defaults, 32 buckets and max_distance 128, worked by hand.
# Bidirectional: 16 buckets a side, 8 exact; d >= 8 takes
# 8 + floor(log(d / 8) / log(16) * 8), at most 15; keys after the query + 16.
# Causal: 32 buckets, 16 exact; d >= 16 takes 16 + floor(log(d / 16) /
# log(8) * 16), at most 31; keys after the query are distance 0.
HAND_BIDIRECTIONAL = {
    0: 0, -1: 1, -7: 7, -8: 8, -12: 9,  # log(1.5)/log(16)*8 = 1.17
    -16: 10,  # log(2)/log(16)*8 = 2
    -50: 13,  # log(6.25)/log(16)*8 = 5.29
    -100: 15, -128: 15, -1000: 15,  # 7.29, 8 and beyond: the last bucket
    1: 17, 8: 24, 16: 26, 300: 31,
}  # fmt: skip
HAND_CAUSAL = {
    5: 0, 0: 0, -5: 5, -15: 15, -16: 16,
    -32: 21,  # log(2)/log(8)*16 = 5.33
    -64: 26,  # log(4)/log(8)*16 = 10.67
    -127: 31, -128: 31, -5000: 31,
}  # fmt: skip


@pytest.mark.parametrize(
    "bidirectional, hand", [(True, HAND_BIDIRECTIONAL), (False, HAND_CAUSAL)]
)
def test_buckets_equal_hand_computed_ones(bidirectional, hand):
    relative = np.array(list(hand))
    got = np.asarray(relative_position_bucket(relative, bidirectional, 32, 128))
    assert got.tolist() == list(hand.values())


@pytest.mark.parametrize("bidirectional", [True, False])
def test_buckets_equal_transformers_table(bidirectional):
    reference = dict(np.load(FIXTURES / "tiny_t5_reference.npz"))
    relative = reference["relative_positions"]
    key = "buckets_bidirectional" if bidirectional else "buckets_causal"
    got = np.asarray(relative_position_bucket(relative, bidirectional, 32, 128))
    np.testing.assert_array_equal(got, reference[key])


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("num_buckets, max_distance", [(32, 128), (8, 12), (6, 20)])
def test_buckets_equal_the_float64_formula(bidirectional, num_buckets, max_distance):
    relative = np.arange(-600, 601)
    want = [
        bucket_reference(int(r), bidirectional, num_buckets, max_distance)
        for r in relative
    ]
    got = relative_position_bucket(relative, bidirectional, num_buckets, max_distance)
    np.testing.assert_array_equal(np.asarray(got), want)


def bias_reference(table, query_positions, key_length, bidirectional, buckets, far):
    """(rows, heads, q, k): table[bucket(key - query), head]."""
    rows = []
    for positions in query_positions:
        rows.append(
            [
                [
                    table[bucket_reference(k - q, bidirectional, buckets, far)]
                    for k in range(key_length)
                ]
                for q in positions
            ]
        )
    return np.transpose(np.asarray(rows, np.float64), (0, 3, 1, 2))


@pytest.mark.parametrize("bidirectional", [True, False])
def test_bias_is_the_table_at_each_bucket(bidirectional):
    layer = RelativePositionBias(
        num_heads=3, num_buckets=8, max_distance=12, bidirectional=bidirectional,
        embeddings_initializer="random_normal",
    )  # fmt: skip
    layer.build()
    table = np.asarray(layer.embeddings, np.float64)
    got = layer(query_length=5, key_length=20)
    want = bias_reference(table, [range(5)], 20, bidirectional, 8, 12)
    assert tuple(got.shape) == (1, 3, 5, 20)
    assert keras.backend.standardize_dtype(got.dtype) == "float32"
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6)
    # A decoding step at position 13 of a 20-slot cache.
    step = layer(query_length=1, key_length=20, query_start=13)
    want = bias_reference(table, [[13]], 20, bidirectional, 8, 12)
    np.testing.assert_allclose(np.asarray(step), want, rtol=1e-6)
    # One start per row (batched decoding with rows at different positions).
    rows = layer(query_length=2, key_length=20, query_start=np.array([3, 17]))
    want = bias_reference(table, [[3, 4], [17, 18]], 20, bidirectional, 8, 12)
    np.testing.assert_allclose(np.asarray(rows), want, rtol=1e-6)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(num_buckets=3), "at least one exact bucket"),
        (dict(num_buckets=8, max_distance=2), "must exceed the exact"),
        (dict(num_buckets=0), "num_buckets"),
        (dict(bidirectional="yes"), "bidirectional"),
    ],
)
def test_bias_bad_arguments_raise(kwargs, message):
    with pytest.raises(ValueError, match=message):
        RelativePositionBias(num_heads=2, **kwargs)


def test_bias_config_round_trips():
    layer = RelativePositionBias(4, 16, 40, bidirectional=False)
    again = RelativePositionBias.from_config(layer.get_config())
    assert again.get_config() == layer.get_config()


def t5_attention_reference(x, context, attention, bias, mask):
    """softmax(Q K^T + bias, masked) V per head, without 1/sqrt(d) (T5)."""
    kernel = lambda dense: np.asarray(dense.kernel, np.float64)  # noqa: E731
    heads, dim = attention.num_heads, attention.effective_head_dim
    q = (x @ kernel(attention.query_dense)).reshape(*x.shape[:2], heads, dim)
    kv = context @ kernel(attention.key_value_dense)
    k = kv[..., : heads * dim].reshape(*context.shape[:2], heads, dim)
    v = kv[..., heads * dim :].reshape(*context.shape[:2], heads, dim)
    outputs = []
    for h in range(heads):
        logits = q[:, :, h] @ np.swapaxes(k[:, :, h], 1, 2) + bias[:, h]
        logits = np.where(mask, logits, -np.inf)
        outputs.append(softmax(logits) @ v[:, :, h])
    return np.concatenate(outputs, -1) @ kernel(attention.output_dense)


def test_unscaled_attention_with_a_bias_equals_t5s_formula():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 6, 8))
    bias = rng.normal(size=(1, 2, 6, 6)) * 3
    attention = MultiHeadSelfAttention(
        num_heads=2, head_dim=5, use_bias=False, scale_attention=False,
        kernel_initializer=keras.initializers.RandomNormal(stddev=0.5, seed=0),
    )  # fmt: skip
    padding = np.array([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]], bool)
    got = attention(
        x.astype("float32"), use_causal_mask=True, padding_mask=padding,
        attention_bias=bias.astype("float32"),
    )  # fmt: skip
    mask = np.tril(np.ones((6, 6), bool))[None] & padding[:, None, :]
    want = t5_attention_reference(
        x, x, attention, np.broadcast_to(bias, (2, 2, 6, 6)), mask
    )
    np.testing.assert_allclose(np.asarray(got), want, atol=2e-5, rtol=1e-5)
    # The scores come from the same logits.
    _, scores = attention.call_with_scores(
        x.astype("float32"), use_causal_mask=True, padding_mask=padding,
        attention_bias=bias.astype("float32"),
    )  # fmt: skip
    assert np.allclose(np.sum(np.asarray(scores), -1), 1.0, atol=1e-5)
    # The default scales by 1/sqrt(head_dim): a different answer.
    scaled = MultiHeadSelfAttention(num_heads=2, head_dim=5, use_bias=False)
    scaled(x.astype("float32"))
    scaled.set_weights(attention.get_weights())
    other = scaled(x.astype("float32"), use_causal_mask=True, padding_mask=padding,
                   attention_bias=bias.astype("float32"))  # fmt: skip
    assert np.abs(np.asarray(other) - want).max() > 0.05 * np.ptp(want)


def test_attention_bias_with_a_wrong_shape_raises():
    attention = MultiHeadSelfAttention(num_heads=2)
    x = np.ones((1, 4, 8), "float32")
    with pytest.raises(ValueError, match=r"attention_bias.*Received"):
        attention(x, attention_bias=np.zeros((1, 3, 4, 4), "float32"))


def t5_block_reference(x, block, bias, mask, context=None):
    """T5's pre-norm layer: x + Attn(RMS(x)); (+ Cross(RMS(x))); x + FFN(RMS(x))."""
    eps = block.layer_norm_epsilon
    scale = lambda norm: np.asarray(norm.scale, np.float64)  # noqa: E731
    h = rms_norm(x, scale(block.self_attention_norm), eps)
    x = x + t5_attention_reference(h, h, block.self_attention, bias, mask)
    if context is not None:
        h = rms_norm(x, scale(block.cross_attention_norm), eps)
        no_bias = np.zeros((1, block.num_heads, x.shape[1], context.shape[1]))
        everything = np.ones((x.shape[0], x.shape[1], context.shape[1]), bool)
        x = x + t5_attention_reference(
            h, context, block.cross_attention, no_bias, everything
        )
    ffn = block.feed_forward
    h = rms_norm(x, scale(block.feed_forward_norm), eps)
    w1 = np.asarray(ffn.intermediate_dense.kernel, np.float64)
    w2 = np.asarray(ffn.output_dense.kernel, np.float64)
    no_bias = np.zeros(w1.shape[1]), np.zeros(w2.shape[1])
    return x + feed_forward(h, w1, no_bias[0], w2, no_bias[1], ffn.activation)


T5_BLOCK = dict(
    num_heads=2, intermediate_dim=12, head_dim=6, normalize_first=True,
    normalization="rms_norm", layer_norm_epsilon=1e-6, use_bias=False,
    scale_attention=False,
    kernel_initializer=keras.initializers.RandomNormal(stddev=0.5, seed=1),
)  # fmt: skip


@pytest.mark.parametrize("activation", ["relu", "geglu_approximate"])
def test_encoder_block_is_t5s_layer(activation):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(2, 7, 8))
    bias = rng.normal(size=(1, 2, 7, 7))
    block = TransformerEncoderBlock(**T5_BLOCK, activation=activation)
    block(x.astype("float32"))
    for norm in (block.self_attention_norm, block.feed_forward_norm):
        norm.scale.assign(rng.uniform(0.5, 1.5, size=8))
    got = block(x.astype("float32"), attention_bias=bias.astype("float32"))
    want = t5_block_reference(x, block, bias, np.ones((2, 7, 7), bool))
    np.testing.assert_allclose(np.asarray(got), want, atol=5e-5, rtol=1e-5)


def test_decoder_block_is_t5s_layer_and_its_cache_the_full_pass():
    rng = np.random.default_rng(2)
    x, source = rng.normal(size=(1, 6, 8)), rng.normal(size=(1, 5, 8))
    bias = rng.normal(size=(1, 2, 6, 6))
    block = DecoderBlock(**T5_BLOCK, activation="geglu_approximate")
    block(x.astype("float32"), encoder_outputs=source.astype("float32"))
    got = block(x.astype("float32"), encoder_outputs=source.astype("float32"),
                attention_bias=bias.astype("float32"))  # fmt: skip
    causal = np.tril(np.ones((6, 6), bool))[None]
    want = t5_block_reference(x, block, bias, causal, context=source)
    np.testing.assert_allclose(np.asarray(got), want, atol=5e-5, rtol=1e-5)
    # Step by step with the cache: step t reads row t of the bias, padded
    # with anything to the cache's length (the unwritten slots are masked).
    from keras_tfm.layers import AttentionCache

    cache = block.empty_cache(1, 8)
    cross = block.compute_cross_attention_cache(source.astype("float32"))
    padded = np.concatenate([bias, rng.normal(size=(1, 2, 6, 2))], -1)
    steps = []
    for t in range(6):
        out, cache = block(
            x[:, t : t + 1].astype("float32"), cache=AttentionCache(cache, t),
            cross_attention_cache=cross,
            attention_bias=padded[:, :, t : t + 1].astype("float32"),
        )  # fmt: skip
        steps.append(np.asarray(out))
    np.testing.assert_allclose(np.concatenate(steps, 1), want, atol=5e-5, rtol=1e-5)


def test_t5_options_default_off():
    block = TransformerEncoderBlock(num_heads=2, intermediate_dim=8)
    assert block.scale_attention is True
    assert "scale_attention" not in BLOCK_ARGUMENTS  # the families' arguments
    assert MultiHeadSelfAttention(num_heads=2).scale_attention is True
    assert block.get_config()["scale_attention"] is True
    with pytest.raises(ValueError, match="scale_attention"):
        TransformerEncoderBlock(num_heads=2, intermediate_dim=8, scale_attention="no")


def test_rms_norm_is_t5s_layer_norm():
    """T5LayerNorm: x / sqrt(mean(x^2) + eps) * w, no mean, no bias."""
    from keras_tfm.layers.normalization import make_normalization

    norm = make_normalization("rms_norm", 1e-6, hidden_dim=8)
    assert [w.name for w in norm.weights] == ["scale"]
    x = np.random.default_rng(3).normal(loc=2.0, size=(2, 3, 8))
    norm.scale.assign(np.linspace(0.5, 1.5, 8))
    want = x / np.sqrt((x**2).mean(-1, keepdims=True) + 1e-6) * np.linspace(0.5, 1.5, 8)
    np.testing.assert_allclose(np.asarray(norm(x.astype("float32"))), want, rtol=1e-5)
    assert keras.ops.convert_to_numpy(norm(x.astype("float32"))).dtype == np.float32

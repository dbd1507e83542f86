"""How many values a call returns depends on its arguments only, as documented;
`build` never rewrites a constructor argument."""

import numpy as np
import pytest

from keras_tfm.layers import (
    AttentionCache,
    DecoderBlock,
    MultiHeadSelfAttention,
    TransformerEncoderBlock,
)


def x(batch=2, seq=5, dim=8, seed=0):
    return np.random.default_rng(seed).normal(size=(batch, seq, dim)).astype("float32")


@pytest.mark.parametrize(
    "make",
    [
        lambda: MultiHeadSelfAttention(num_heads=2),
        lambda: MultiHeadSelfAttention(num_heads=4, num_key_value_heads=2),
        lambda: TransformerEncoderBlock(num_heads=2, intermediate_dim=16),
        lambda: DecoderBlock(num_heads=2, intermediate_dim=16, num_key_value_heads=1),
    ],
)
def test_get_config_is_the_same_before_and_after_build(make):
    layer = make()
    before = layer.get_config()
    layer(x())
    assert layer.get_config() == before
    assert before["head_dim"] is None
    if isinstance(layer, MultiHeadSelfAttention):
        assert layer.effective_head_dim == 8 // layer.num_heads
        expected_kv = layer.num_key_value_heads or layer.num_heads
        assert layer.effective_num_key_value_heads == expected_kv


def test_a_rebuilt_layer_derives_its_head_size_from_the_new_width():
    # The stored argument stays None, so a clone built on another width
    # derives its own head size instead of inheriting the first one.
    layer = MultiHeadSelfAttention(num_heads=2)
    layer(x(dim=8))
    clone = MultiHeadSelfAttention.from_config(layer.get_config())
    clone(x(dim=12))
    assert clone.effective_head_dim == 6


def test_attention_returns_outputs_or_outputs_and_cache_as_documented():
    layer = MultiHeadSelfAttention(num_heads=2)
    inputs = x()
    outputs = layer(inputs)
    assert tuple(outputs.shape) == (2, 5, 8)
    with_scores, scores = layer.call_with_scores(inputs)
    np.testing.assert_array_equal(np.asarray(with_scores), np.asarray(outputs))
    assert tuple(scores.shape) == (2, 2, 5, 5)
    np.testing.assert_allclose(np.asarray(scores).sum(-1), 1.0, atol=1e-5)
    cache = layer.empty_cache(2, 5)
    outputs, cache = layer(inputs, cache=AttentionCache(cache, 0))
    assert tuple(cache.shape) == (2, 2, 5, 2, 4)
    with pytest.raises(ValueError, match="AttentionCache.*Received: cache of type"):
        layer(inputs, cache=cache)


def test_blocks_return_a_pair_exactly_when_asked():
    encoder = TransformerEncoderBlock(num_heads=2, intermediate_dim=16)
    inputs = x()
    assert tuple(encoder(inputs).shape) == (2, 5, 8)
    outputs, scores = encoder(inputs, return_attention_scores=True)
    np.testing.assert_allclose(np.asarray(outputs), np.asarray(encoder(inputs)))
    assert tuple(scores.shape) == (2, 2, 5, 5)

    decoder = DecoderBlock(num_heads=2, intermediate_dim=16)
    full = np.asarray(decoder(inputs))
    cache = decoder.empty_cache(2, 5)
    steps = []
    for t in range(5):
        out, cache = decoder(inputs[:, t : t + 1], cache=AttentionCache(cache, t))
        steps.append(np.asarray(out)[:, 0])
    np.testing.assert_allclose(np.stack(steps, 1), full, atol=1e-5)


@pytest.mark.parametrize("normalize_first", [False, True])
def test_the_block_is_the_written_residual_recipe(normalize_first):
    # An independent composition of the block's own sublayers, following the
    # docstring's formulas, must give the block's output.
    block = TransformerEncoderBlock(
        num_heads=2, intermediate_dim=16, normalize_first=normalize_first
    )
    inputs = x(seed=3)
    got = np.asarray(block(inputs))
    h = inputs
    for sublayer, norm in (
        (block.self_attention, block.self_attention_norm),
        (block.feed_forward, block.feed_forward_norm),
    ):
        if normalize_first:
            h = h + np.asarray(sublayer(norm(h)))
        else:
            h = np.asarray(norm(h + np.asarray(sublayer(h))))
    np.testing.assert_allclose(got, h, atol=1e-5)


def test_blocks_pass_rotary_max_wavelength_to_attention():
    block = DecoderBlock(
        num_heads=2, intermediate_dim=16, use_rotary=True, rotary_max_wavelength=500
    )
    block(x())
    assert block.self_attention.rotary_embedding.max_wavelength == 500
    assert block.get_config()["rotary_max_wavelength"] == 500

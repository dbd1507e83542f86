import keras
import numpy as np
import pytest
from keras import ops

from keras_tfm.layers import PositionalEncoding, TokenEmbedding, TransformerEncoderBlock
from tests.layers.block_reference import block as reference_block
from tests.layers.layer_harness import (
    assert_dropout_reaches_every_sublayer,
    randomize_weights,
    run_layer_test,
)

DIM = 8


def _x(*shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


def _built(seed=0, **kwargs):
    kwargs.setdefault("num_heads", 2)
    kwargs.setdefault("intermediate_dim", 16)
    layer = TransformerEncoderBlock(**kwargs)
    layer(_x(1, 2, DIM))
    randomize_weights(layer, seed=seed)
    # Norm scales near 1 keep the block in its usual regime.
    for weight in layer.weights:
        if weight.name in ("gamma", "scale"):
            weight.assign(1.0 + 0.1 * np.asarray(weight))
    return layer


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"normalize_first": True},
        {"normalization": "rms_norm", "activation": "gelu"},
        {"activation": "swiglu", "num_heads": 4, "num_key_value_heads": 2},
        {"use_rotary": True, "normalize_first": True, "layer_norm_epsilon": 1e-12},
    ],
)
def test_matches_reference(kwargs):
    layer = _built(**kwargs)
    x = _x(2, 6, DIM, seed=1)
    padding = np.array([[1] * 6, [1] * 4 + [0] * 2])
    mask = np.broadcast_to(padding[:, None, :].astype(bool), (2, 6, 6))
    np.testing.assert_allclose(
        np.asarray(layer(x, padding_mask=padding)),
        reference_block(layer, x, mask),
        atol=1e-5,
        rtol=0,
    )


def test_padding_and_implicit_mask_through_a_stack():
    ids = np.array([[5, 3, 8, 2, 0, 0], [7, 1, 0, 0, 0, 0]])
    inputs = keras.Input((None,), dtype="int32")
    embedding = TokenEmbedding(10, DIM, mask_zero=True, scale_embeddings=True)
    blocks = [TransformerEncoderBlock(2, 16, normalize_first=first) for first in (0, 1)]
    hidden = PositionalEncoding()(embedding(inputs))
    for b in blocks:
        hidden = b(hidden)
    model = keras.Model(inputs, hidden)
    implicit = np.asarray(model(ids))

    plain = PositionalEncoding()(ops.convert_to_tensor(np.asarray(embedding(ids))))
    explicit = plain
    for b in blocks:
        explicit = b(explicit, padding_mask=ids != 0)
    np.testing.assert_allclose(implicit, np.asarray(explicit), atol=1e-6)

    # Changing the tokens at padded positions leaves real positions unchanged.
    changed = np.where(ids == 0, 9, ids)
    hidden = PositionalEncoding()(ops.convert_to_tensor(np.asarray(embedding(changed))))
    for b in blocks:
        hidden = b(hidden, padding_mask=ids != 0)
    real = ids != 0
    np.testing.assert_allclose(np.asarray(hidden)[real], implicit[real], atol=1e-6)


def test_returns_attention_scores():
    layer = _built()
    out, scores = layer(_x(2, 6, DIM), return_attention_scores=True)
    assert tuple(out.shape) == (2, 6, DIM)
    assert tuple(scores.shape) == (2, 2, 6, 6)
    np.testing.assert_allclose(np.asarray(scores).sum(-1), 1.0, atol=1e-5)


def test_dropout_reaches_every_sublayer():
    layer = _built(dropout=0.5)
    x = _x(2, 6, DIM)
    assert_dropout_reaches_every_sublayer(
        layer, lambda training: layer(x, training=training)
    )


@pytest.mark.parametrize("normalize_first", [False, True])
def test_layer_contract(normalize_first, tmp_path):
    run_layer_test(
        lambda: TransformerEncoderBlock(
            num_heads=2, intermediate_dim=16, normalize_first=normalize_first
        ),
        {
            "inputs": _x(2, 5, DIM),
            "padding_mask": np.array([[1] * 5, [1] * 3 + [0] * 2]),
        },
        expected_output_shape=(2, 5, DIM),
        tmp_path=tmp_path,
    )


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"num_heads": 0, "intermediate_dim": 8}, "num_heads=0"),
        ({"num_heads": 2, "intermediate_dim": -1}, "intermediate_dim=-1"),
        ({"num_heads": 2, "intermediate_dim": 8, "dropout": -0.1}, "dropout=-0.1"),
        (
            {"num_heads": 2, "intermediate_dim": 8, "normalization": "batch"},
            "normalization='batch'",
        ),
        (
            {"num_heads": 2, "intermediate_dim": 8, "layer_norm_epsilon": 0},
            "layer_norm_epsilon=0",
        ),
        (
            {"num_heads": 4, "intermediate_dim": 8, "num_key_value_heads": 3},
            "num_key_value_heads=3",
        ),
    ],
)
def test_bad_constructor_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        TransformerEncoderBlock(**kwargs)


def test_bad_inputs():
    layer = _built()
    with pytest.raises(ValueError, match=r"inputs.shape=\(6, 8\)"):
        layer(_x(6, DIM))
    with pytest.raises(ValueError, match=r"must be 8.*inputs.shape=\(2, 6, 4\)"):
        layer(_x(2, 6, 4))
    with pytest.raises(ValueError, match=r"padding_mask.shape=\(2, 5\)"):
        layer(_x(2, 6, DIM), padding_mask=np.ones((2, 5)))
    with pytest.raises(ValueError, match="hidden_dim=9, num_heads=2"):
        TransformerEncoderBlock(2, 8)(_x(1, 2, 9))

import math

import keras
import keras_hub
import numpy as np
import pytest

from keras_tfm.models import EncoderBackbone

TINY = dict(
    vocabulary_size=30,
    num_layers=2,
    num_heads=2,
    hidden_dim=16,
    intermediate_dim=32,
    max_sequence_length=10,
)


def make_backbone(**overrides):
    return EncoderBackbone(**{**TINY, **overrides})


def randomize(model, seed=0, scale=0.3):
    """Non-trivial norms and biases, so that every weight shows in the output."""
    rng = np.random.default_rng(seed)
    for weight in model.weights:
        weight.assign(rng.normal(0, scale, weight.shape).astype("float32"))


def token_batch(seed=0, lengths=(10, 6, 3)):
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, TINY["vocabulary_size"], (len(lengths), 10))
    for row, length in enumerate(lengths):
        ids[row, length:] = 0
    return ids.astype("int32")


# An independent float64 BERT written from HuggingFace's BertModel, reading
# the weights by the sublayer names that a checkpoint converter relies on.
def _layer_norm(x, gamma, beta, eps):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def _gelu(x):
    return 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))


def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def bert_reference(weights, token_ids, segment_ids, num_layers, num_heads, eps):
    w = {name: np.asarray(value, np.float64) for name, value in weights.items()}
    batch, seq = token_ids.shape
    x = (
        w["token_embedding/embeddings"][token_ids]
        + w["position_embedding/embeddings"][:seq][None]
        + w["segment_embedding/embeddings"][segment_ids]
    )
    x = _layer_norm(
        x, w["embeddings_layer_norm/gamma"], w["embeddings_layer_norm/beta"], eps
    )
    hidden = x.shape[-1]
    head_dim = hidden // num_heads
    keep = token_ids != 0  # (batch, seq) keys that may be attended to
    for i in range(num_layers):
        p = f"transformer_layer_{i}/"
        q = (
            x @ w[p + "self_attention/query/kernel"]
            + w[p + "self_attention/query/bias"]
        )
        kv = (
            x @ w[p + "self_attention/key_value/kernel"]
            + w[p + "self_attention/key_value/bias"]
        )
        k, v = kv[..., :hidden], kv[..., hidden:]
        heads = []
        for h in range(num_heads):
            cols = slice(h * head_dim, (h + 1) * head_dim)
            logits = q[..., cols] @ k[..., cols].transpose(0, 2, 1)
            logits = logits / math.sqrt(head_dim)
            logits = np.where(keep[:, None, :], logits, -1e30)
            heads.append(_softmax(logits) @ v[..., cols])
        attn = (
            np.concatenate(heads, -1) @ w[p + "self_attention/attention_output/kernel"]
            + w[p + "self_attention/attention_output/bias"]
        )
        x = _layer_norm(
            x + attn,
            w[p + "self_attention_norm/gamma"],
            w[p + "self_attention_norm/beta"],
            eps,
        )
        ffn = _gelu(
            x @ w[p + "feed_forward/intermediate/kernel"]
            + w[p + "feed_forward/intermediate/bias"]
        )
        ffn = (
            ffn @ w[p + "feed_forward/output/kernel"]
            + w[p + "feed_forward/output/bias"]
        )
        x = _layer_norm(
            x + ffn,
            w[p + "feed_forward_norm/gamma"],
            w[p + "feed_forward_norm/beta"],
            eps,
        )
    return x


def test_matches_an_independent_bert_forward_pass():
    backbone = make_backbone(layer_norm_epsilon=1e-6)
    randomize(backbone)
    token_ids = token_batch()
    segment_ids = (np.arange(10)[None] >= 4).astype("int32").repeat(3, 0)
    got = backbone({"token_ids": token_ids, "segment_ids": segment_ids})
    weights = {w.path: w.numpy() for w in backbone.weights}
    want = bert_reference(weights, token_ids, segment_ids, 2, 2, 1e-6)
    real = token_ids != 0
    np.testing.assert_allclose(np.asarray(got)[real], want[real], atol=2e-4)


def copy_keras_hub_bert_weights(bert, backbone):
    """Maps keras-hub BertBackbone weights onto ours (what a converter does)."""
    theirs = {w.path: w.numpy() for w in bert.weights}
    ours = {w.path: w for w in backbone.weights}
    for name in (
        "token_embedding/embeddings",
        "position_embedding/embeddings",
        "segment_embedding/embeddings",
        "embeddings_layer_norm/gamma",
        "embeddings_layer_norm/beta",
    ):
        ours[name].assign(theirs[name])
    for i in range(backbone.num_layers):
        t, o = f"transformer_layer_{i}/", f"transformer_layer_{i}/"
        att = t + "self_attention_layer/"
        hidden = backbone.hidden_dim
        ours[o + "self_attention/query/kernel"].assign(
            theirs[att + "query/kernel"].reshape(hidden, -1)
        )
        ours[o + "self_attention/query/bias"].assign(theirs[att + "query/bias"].ravel())
        # Our key/value projection is fused: all key heads, then all values.
        ours[o + "self_attention/key_value/kernel"].assign(
            np.concatenate(
                [
                    theirs[att + n + "/kernel"].reshape(hidden, -1)
                    for n in ("key", "value")
                ],
                axis=1,
            )
        )
        ours[o + "self_attention/key_value/bias"].assign(
            np.concatenate(
                [theirs[att + n + "/bias"].ravel() for n in ("key", "value")]
            )
        )
        ours[o + "self_attention/attention_output/kernel"].assign(
            theirs[att + "attention_output/kernel"].reshape(-1, hidden)
        )
        ours[o + "self_attention/attention_output/bias"].assign(
            theirs[att + "attention_output/bias"]
        )
        pairs = {
            "self_attention_norm": "self_attention_layer_norm",
            "feed_forward_norm": "feedforward_layer_norm",
            "feed_forward/intermediate": "feedforward_intermediate_dense",
            "feed_forward/output": "feedforward_output_dense",
        }
        for our_name, their_name in pairs.items():
            for leaf in ("gamma", "beta", "kernel", "bias"):
                if o + f"{our_name}/{leaf}" in ours:
                    ours[o + f"{our_name}/{leaf}"].assign(
                        theirs[t + f"{their_name}/{leaf}"]
                    )


def test_matches_keras_hub_bert_backbone():
    bert = keras_hub.models.BertBackbone(
        vocabulary_size=30,
        num_layers=2,
        num_heads=2,
        hidden_dim=16,
        intermediate_dim=32,
        max_sequence_length=10,
    )
    randomize(bert, seed=2)
    backbone = make_backbone()
    copy_keras_hub_bert_weights(bert, backbone)
    token_ids = token_batch(seed=4)
    segment_ids = (np.arange(10)[None] >= 5).astype("int32").repeat(3, 0)
    want = bert(
        {
            "token_ids": token_ids,
            "segment_ids": segment_ids,
            "padding_mask": (token_ids != 0).astype("int32"),
        }
    )["sequence_output"]
    got = backbone({"token_ids": token_ids, "segment_ids": segment_ids})
    real = token_ids != 0
    np.testing.assert_allclose(np.asarray(got)[real], np.asarray(want)[real], atol=1e-4)


def test_weight_names_are_the_documented_ones():
    paths = {w.path for w in make_backbone(num_layers=1).weights}
    for name in (
        "token_embedding/embeddings",
        "position_embedding/embeddings",
        "segment_embedding/embeddings",
        "embeddings_layer_norm/gamma",
        "transformer_layer_0/self_attention/key_value/kernel",
        "transformer_layer_0/feed_forward/output/bias",
        "transformer_layer_0/feed_forward_norm/beta",
    ):
        assert name in paths
    pre_ln = {w.path for w in make_backbone(num_layers=1, normalize_first=True).weights}
    assert "final_norm/gamma" in pre_ln
    assert not any(p.startswith("embeddings_layer_norm") for p in pre_ln)
    no_segments = make_backbone(num_segments=0, position_encoding="sinusoidal")
    assert not any(
        "segment" in w.path or "position" in w.path for w in no_segments.weights
    )


def test_segment_ids_change_the_output_and_default_to_zero():
    backbone = make_backbone()
    randomize(backbone)
    ids = token_batch()
    plain = np.asarray(backbone(ids))
    zeros = np.asarray(backbone({"token_ids": ids, "segment_ids": np.zeros_like(ids)}))
    ones = np.asarray(backbone({"token_ids": ids, "segment_ids": np.ones_like(ids)}))
    np.testing.assert_allclose(plain, zeros, atol=1e-6)
    assert np.abs(plain - ones).max() > 1e-2


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"normalize_first": True, "position_encoding": "sinusoidal"},
        {"normalization": "rms_norm", "activation": "relu", "num_segments": 0},
    ],
)
def test_padding_does_not_change_real_positions(options):
    backbone = make_backbone(**options)
    randomize(backbone)
    ids = token_batch()
    other = ids.copy()
    real = ids != 0
    # Padding positions filled with arbitrary ids but marked as padding.
    other[~real] = np.random.default_rng(1).integers(1, 30, (~real).sum())
    a = np.asarray(backbone(ids))
    b = np.asarray(backbone({"token_ids": other, "padding_mask": real}))
    np.testing.assert_allclose(a[real], b[real], atol=1e-5)
    # Without the padding mask, the new ids are real tokens and do matter.
    c = np.asarray(backbone(other))
    assert np.abs(a[real] - c[real]).max() > 1e-3


def test_attention_scores_per_layer():
    backbone = make_backbone()
    ids = token_batch()
    hidden, scores = backbone(ids, return_attention_scores=True)
    np.testing.assert_allclose(hidden, backbone(ids), atol=1e-6)
    assert len(scores) == 2
    for layer_scores in scores:
        layer_scores = np.asarray(layer_scores)
        assert layer_scores.shape == (3, 2, 10, 10)
        np.testing.assert_allclose(layer_scores.sum(-1), 1.0, atol=1e-5)
        # Padded keys get no attention at all.
        assert np.all(layer_scores[2, :, :, 3:] == 0)


def test_dropout_only_in_training():
    backbone = make_backbone(dropout=0.5)
    ids = token_batch()
    np.testing.assert_allclose(backbone(ids), backbone(ids), atol=0)
    assert np.abs(backbone(ids, training=True) - backbone(ids)).max() > 1e-3


def test_config_is_the_constructor_arguments_and_round_trips():
    backbone = make_backbone(position_encoding="sinusoidal", padding_id=None)
    config = backbone.get_config()
    for key, value in {**TINY, "position_encoding": "sinusoidal"}.items():
        assert config[key] == value
    assert config["padding_id"] is None
    clone = EncoderBackbone.from_config(config)
    assert clone.get_config() == config


def test_save_and_load_give_identical_outputs(tmp_path):
    backbone = make_backbone()
    randomize(backbone)
    ids = token_batch()
    path = str(tmp_path / "backbone.keras")
    backbone.save(path)
    loaded = keras.models.load_model(path)
    assert isinstance(loaded, EncoderBackbone)
    np.testing.assert_array_equal(loaded(ids), backbone(ids))


def test_works_inside_a_functional_model():
    backbone = make_backbone()
    inputs = keras.Input(shape=(None,), dtype="int32")
    model = keras.Model(inputs, backbone(inputs))
    ids = token_batch()
    np.testing.assert_allclose(model(ids), backbone(ids), atol=1e-6)


@pytest.mark.parametrize(
    "inputs, message",
    [
        (np.ones((2, 3, 4), "int32"), "rank 2"),
        (np.ones((2, 4), "float32"), "token_ids.dtype=float32"),
        (np.ones((2, 11), "int32"), "max_sequence_length"),
        ({"token_ids": np.ones((2, 4), "int32"), "typo": np.ones((2, 4))}, "typo"),
        (
            {
                "token_ids": np.ones((2, 4), "int32"),
                "segment_ids": np.ones((2, 5), "int32"),
            },
            "segment_ids",
        ),
        (
            {"token_ids": np.ones((2, 4), "int32"), "padding_mask": np.ones((2, 3))},
            "padding_mask",
        ),
    ],
)
def test_bad_inputs_raise(inputs, message):
    with pytest.raises(ValueError, match=message):
        make_backbone()(inputs)


def test_segment_ids_without_segment_embedding_raise():
    ids = np.ones((1, 4), "int32")
    with pytest.raises(ValueError, match="num_segments=0"):
        make_backbone(num_segments=0)({"token_ids": ids, "segment_ids": ids})


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"position_encoding": "rope"}, "position_encoding"),
        ({"num_layers": 0}, "num_layers=0"),
        ({"num_segments": -1}, "num_segments=-1"),
        ({"hidden_dim": 15}, "hidden_dim=15"),
        ({"padding_id": 30}, "padding_id=30"),
        ({"dropout": 1.0}, "dropout=1.0"),
    ],
)
def test_bad_arguments_raise(overrides, message):
    with pytest.raises(ValueError, match=message):
        make_backbone(**overrides)

"""Seq2SeqBackbone's T5 options: relative positions, unscaled attention, the
scaled tied head. Cached decoding against the full pass, the bias computed
once per stack, and the defaults unchanged."""

import numpy as np
import pytest

from keras_tfm.models import Seq2SeqBackbone, Seq2SeqLM

T5_LIKE = dict(
    vocabulary_size=30, num_encoder_layers=2, num_decoder_layers=2, num_heads=2,
    hidden_dim=8, intermediate_dim=12, head_dim=3, max_sequence_length=40,
    position_encoding="relative", scale_attention=False, normalize_first=True,
    normalization="rms_norm", use_bias=False, scale_embeddings=False,
    activation="geglu_approximate", relative_attention_num_buckets=8,
    relative_attention_max_distance=6, layer_norm_epsilon=1e-6,
)  # fmt: skip


def t5_like(seed=0, **task):
    backbone = Seq2SeqBackbone(**T5_LIKE)
    rng = np.random.default_rng(seed)
    backbone.set_weights(
        [rng.normal(scale=0.7, size=w.shape) for w in backbone.get_weights()]
    )
    return Seq2SeqLM(backbone, start_token_id=0, **task)


def test_cached_steps_equal_the_full_pass():
    model = t5_like(scale_decoder_outputs=True)
    source = np.array([[5, 6, 7, 8, 9, 10, 11, 1, 0, 0]])
    target = np.array([[0, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]])
    full = np.asarray(model({"source_ids": source, "target_ids": target}))
    backbone = model.backbone
    mask = source != 0
    cross = backbone.compute_cross_attention_cache(backbone.encode(source, mask))
    caches = backbone.empty_cache(1, 16)
    steps = []
    for t in range(target.shape[1]):  # past max_distance: the log buckets
        hidden, caches = backbone.call_with_cache(
            target[:, t : t + 1], caches, t, cross, mask
        )
        steps.append(np.asarray(model.logits(hidden)))
    np.testing.assert_allclose(np.concatenate(steps, 1), full, atol=2e-5, rtol=1e-5)
    # A prefill of the first five, then steps.
    caches = backbone.empty_cache(1, 16)
    hidden, caches = backbone.call_with_cache(target[:, :5], caches, 0, cross, mask)
    np.testing.assert_allclose(
        np.asarray(model.logits(hidden)), full[:, :5], atol=2e-5, rtol=1e-5
    )


def test_one_table_per_stack_is_shared_by_its_layers():
    model = t5_like()
    names = [w.path for w in model.weights if "relative" in w.path]
    assert names == [
        "encoder_relative_position_bias/embeddings",
        "decoder_relative_position_bias/embeddings",
    ]
    # The encoder's positions matter: moving a token changes its neighbours'
    # outputs even with the same bag of tokens (no absolute embedding).
    encode = model.backbone.encode
    a = np.asarray(encode(np.array([[3, 4, 5, 6]])))
    b = np.asarray(encode(np.array([[4, 3, 5, 6]])))
    assert not np.allclose(a[0, 2:], b[0, 2:], atol=1e-4)
    # Zeroing the encoder's table leaves the decoder's bias in place.
    table = model.backbone.encoder_relative_position_bias.embeddings
    table.assign(np.zeros(table.shape))
    a = np.asarray(encode(np.array([[3, 4, 5, 6]])))
    b = np.asarray(encode(np.array([[4, 3, 5, 6]])))
    np.testing.assert_allclose(a[0, 2:], b[0, 2:], atol=1e-5)


def test_scaled_head_divides_the_tied_logits_by_sqrt_d():
    plain, scaled = t5_like(), t5_like(scale_decoder_outputs=True)
    ids = {"source_ids": np.array([[3, 4, 5]]), "target_ids": np.array([[0, 6]])}
    np.testing.assert_allclose(
        np.asarray(scaled(ids)), np.asarray(plain(ids)) / np.sqrt(8), rtol=1e-5
    )
    again = Seq2SeqLM.from_config(scaled.get_config())
    assert again.scale_decoder_outputs and again.backbone.position_encoding == (
        "relative"
    )


def test_the_new_options_default_off():
    backbone = Seq2SeqBackbone(
        vocabulary_size=20, num_encoder_layers=1, num_decoder_layers=1,
        num_heads=2, hidden_dim=8, intermediate_dim=16, max_sequence_length=8,
    )  # fmt: skip
    assert backbone.scale_attention and backbone.position_encoding == "sinusoidal"
    assert backbone.encoder_relative_position_bias is None
    assert not any("relative" in w.path for w in backbone.weights)
    assert not Seq2SeqLM(backbone, start_token_id=1).scale_decoder_outputs


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(position_encoding="alibi"), "position_encoding"),
        (dict(relative_attention_num_buckets=2), "exact bucket"),
        (dict(scale_attention="no"), "scale_attention"),
    ],
)
def test_bad_t5_options_raise(overrides, message):
    with pytest.raises(ValueError, match=message):
        Seq2SeqBackbone(**{**T5_LIKE, **overrides})


def test_attention_scores_include_the_bias():
    model = t5_like()
    ids = {"source_ids": np.array([[3, 4, 5, 6]]), "target_ids": np.array([[0, 6, 7]])}
    logits, scores = model(ids, return_attention_scores=True)
    np.testing.assert_allclose(np.asarray(logits), np.asarray(model(ids)), atol=1e-6)
    decoder = np.asarray(scores["decoder_self_attention"][0])
    assert np.allclose(decoder.sum(-1), 1.0, atol=1e-5)
    assert np.all(decoder[..., np.triu_indices(3, 1)[0], np.triu_indices(3, 1)[1]] == 0)
    # Without the encoder's table the first layer's weights change.
    before = np.asarray(scores["encoder_self_attention"][0])
    table = model.backbone.encoder_relative_position_bias.embeddings
    table.assign(np.zeros(table.shape))
    _, after = model(ids, return_attention_scores=True)
    assert not np.allclose(before, np.asarray(after["encoder_self_attention"][0]))

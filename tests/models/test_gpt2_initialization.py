"""`DecoderBackbone(initializer_range=r)`: GPT-2's initialization."""

import math

import keras
import numpy as np
import pytest

from keras_tfm import models, zoo
from keras_tfm.models.decoder_backbone import RESIDUAL_OUTPUTS


def _backbone(hidden_dim=128, **kwargs):
    return models.DecoderBackbone(
        vocabulary_size=512, num_layers=4, num_heads=4, hidden_dim=hidden_dim,
        intermediate_dim=256, max_sequence_length=64, **kwargs,
    )  # fmt: skip


def test_weights_are_drawn_as_gpt2_draws_them():
    keras.utils.set_random_seed(0)
    backbone = _backbone(initializer_range=0.02)
    residual = 0.02 / math.sqrt(2 * 4)  # GPT-2's scale for 4 blocks
    seen = set()
    for weight in backbone.weights:
        value = np.asarray(weight.numpy(), "float64")
        if weight.path.endswith(RESIDUAL_OUTPUTS):
            expected = residual
        elif weight.path.endswith(("/kernel", "/embeddings")):
            expected = 0.02
        else:  # biases and the norms' scales keep Keras' zeros and ones
            assert np.all((value == 0) | (value == 1)), weight.path
            continue
        seen.add(weight.path.rsplit("/", 2)[-2])
        # Thousands of draws each: the sample's mean and spread are close.
        assert abs(value.mean()) < 0.1 * expected, weight.path
        assert value.std() == pytest.approx(expected, rel=0.06), weight.path
    assert {"token_embedding", "position_embedding", "query", "key_value",
            "attention_output", "intermediate", "output"} <= seen  # fmt: skip


def test_the_default_keeps_keras_initializers_and_the_setting_round_trips():
    keras.utils.set_random_seed(0)
    plain = _backbone()
    assert plain.initializer_range is None
    # Keras' uniform embeddings: std 0.05 / sqrt(3).
    embeddings = plain.token_embedding.embeddings.numpy()
    assert embeddings.std() == pytest.approx(0.05 / math.sqrt(3), rel=0.05)
    config = _backbone(initializer_range=0.02).get_config()
    assert config["initializer_range"] == 0.02
    assert models.DecoderBackbone.from_config(config).initializer_range == 0.02


@pytest.mark.parametrize("value", [0, -0.02, float("nan"), "0.02", True])
def test_a_range_that_is_not_a_positive_number_is_refused(value):
    with pytest.raises(ValueError, match="initializer_range"):
        _backbone(initializer_range=value)


def test_the_untrained_tied_head_starts_near_the_uniform_loss():
    # After the final norm (unit variance per channel), a tied head's logits
    # have std r * sqrt(width); a label drawn uniformly then costs, in
    # expectation, lse(logits) - mean(logits) = ln(V) + var / 2 nats.
    ids = np.random.default_rng(0).integers(1, 512, (4, 32))
    width, losses = 384, []
    for kwargs in ({}, {"initializer_range": 0.02}):
        keras.utils.set_random_seed(0)
        lm = models.CausalLM(_backbone(hidden_dim=width, **kwargs))
        std = lm.backbone.token_embedding.embeddings.numpy().std()
        logits = np.asarray(lm(ids), "float64")
        top = logits.max(-1, keepdims=True)
        lse = np.log(np.exp(logits - top).sum(-1)) + top[..., 0]
        losses.append((lse - logits.mean(-1)).mean())
        # (Within an eighth: 512 rows are a rough sample of E's covariance.)
        excess = (std * math.sqrt(width)) ** 2 / 2
        assert losses[-1] - math.log(512) == pytest.approx(excess, rel=0.12), kwargs
    assert losses[0] - losses[1] > 0.06  # GPT-2's draw starts lower


def test_the_zoo_gpt_presets_start_as_gpt2():
    assert zoo.from_preset("gpt_nano").backbone.initializer_range == 0.02

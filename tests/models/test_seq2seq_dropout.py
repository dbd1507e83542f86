"""T5's dropout in `Seq2SeqBackbone`: inside every feed-forward network
(`inner_dropout`) and after each stack's final norm (`final_dropout`), in
training only; inference unchanged, the rates kept by config and `.keras`."""

import json

import keras
import numpy as np
import pytest

from keras_tfm.convert import load_hf_t5
from keras_tfm.models import Seq2SeqBackbone, Seq2SeqLM
from tests.convert.decoder_checks import FIXTURES
from tests.models.test_seq2seq_relative_positions import T5_LIKE

SOURCE = np.array([[5, 6, 7, 8, 1, 0], [9, 10, 11, 12, 13, 1]])
TARGET = np.array([[0, 3, 4, 5], [0, 6, 7, 8]])
INPUTS = {"source_ids": SOURCE, "target_ids": TARGET}
NEAR_ONE = 1 - 1e-7  # every unit dropped (a rate of 1 is refused)


def backbone_with(weights=None, **rates):
    backbone = Seq2SeqBackbone(**T5_LIKE, **rates)
    if weights is None:
        rng = np.random.default_rng(0)
        weights = [rng.normal(scale=0.7, size=w.shape) for w in backbone.get_weights()]
    backbone.set_weights(weights)
    return backbone


def mask_of(dropout_layer, shape):
    """The mask (scale included) `dropout_layer` draws next: `keras.random.dropout`
    of ones with a copy of its seed generator's state."""
    generator = keras.random.SeedGenerator(0)
    generator.state.assign(dropout_layer.seed_generator.state.value)
    ones = np.ones(shape, "float32")
    return np.asarray(keras.random.dropout(ones, dropout_layer.rate, seed=generator))


def test_inference_is_unchanged_by_the_rates():
    plain = backbone_with()
    dropping = backbone_with(plain.get_weights(), inner_dropout=0.5, final_dropout=0.5)
    np.testing.assert_array_equal(
        np.asarray(dropping(INPUTS, training=False)), np.asarray(plain(INPUTS))
    )


def test_final_dropout_follows_the_encoders_final_norm():
    keras.utils.set_random_seed(0)
    backbone = backbone_with(final_dropout=0.5)
    normed = np.asarray(backbone.encode(SOURCE, training=False))
    mask = mask_of(backbone.encoder_final_dropout, normed.shape)
    assert 0 < np.count_nonzero(mask) < mask.size
    # Dropout(Norm(h)): the kept values are the normed ones times 1/(1-0.5).
    np.testing.assert_allclose(
        np.asarray(backbone.encode(SOURCE, training=True)), normed * mask,
        atol=1e-6, rtol=1e-6,
    )  # fmt: skip


def test_final_dropout_near_one_zeroes_both_stacks_outputs():
    keras.utils.set_random_seed(0)
    backbone = backbone_with(final_dropout=NEAR_ONE)
    assert not np.any(np.asarray(backbone.encode(SOURCE, training=True)))
    assert not np.any(np.asarray(backbone(INPUTS, training=True)))
    assert np.all(np.asarray(backbone(INPUTS, training=False)) != 0)


def test_inner_dropout_near_one_is_the_zero_feed_forward():
    # T5's feed-forward has no biases: every inner activation dropped, each
    # block's feed-forward adds nothing, as with its output kernel zeroed.
    keras.utils.set_random_seed(0)
    dropping = backbone_with(inner_dropout=NEAR_ONE)
    zeroed = backbone_with(dropping.get_weights())
    blocks = zeroed.encoder_transformer_layers + zeroed.decoder_transformer_layers
    for block in blocks:
        kernel = block.feed_forward.output_dense.kernel
        kernel.assign(np.zeros(kernel.shape, kernel.dtype))
    expected = np.asarray(zeroed(INPUTS, training=False))
    np.testing.assert_allclose(
        np.asarray(dropping(INPUTS, training=True)), expected, atol=1e-6, rtol=1e-6
    )
    assert not np.allclose(np.asarray(dropping(INPUTS, training=False)), expected)


def test_config_and_keras_file_keep_the_rates(tmp_path):
    backbone = backbone_with(inner_dropout=0.2, final_dropout=0.3)
    config = backbone.get_config()
    assert (config["inner_dropout"], config["final_dropout"]) == (0.2, 0.3)
    model = Seq2SeqLM(backbone, start_token_id=0)
    path = tmp_path / "t5_like.keras"
    model.save(path)
    again = keras.saving.load_model(path).backbone
    assert (again.inner_dropout, again.final_dropout) == (0.2, 0.3)
    blocks = again.encoder_transformer_layers + again.decoder_transformer_layers
    assert {b.feed_forward.inner_dropout_layer.rate for b in blocks} == {0.2}
    assert again.encoder_final_dropout.rate == again.decoder_final_dropout.rate == 0.3
    np.testing.assert_array_equal(
        np.asarray(again(INPUTS, training=False)), np.asarray(backbone(INPUTS))
    )


def test_defaults_add_no_dropout_layers():
    backbone = backbone_with()
    assert backbone.encoder_final_dropout is None
    assert backbone.decoder_final_dropout is None
    blocks = backbone.encoder_transformer_layers + backbone.decoder_transformer_layers
    assert all(b.feed_forward.inner_dropout_layer is None for b in blocks)


@pytest.mark.parametrize("folder", ["tiny_t5_hf", "tiny_t5_v1_1_hf"])
def test_a_t5_checkpoint_has_its_dropout_rate_at_every_place(folder):
    rate = json.loads((FIXTURES / folder / "config.json").read_text())["dropout_rate"]
    assert rate > 0
    backbone = load_hf_t5(FIXTURES / folder).backbone
    blocks = backbone.encoder_transformer_layers + backbone.decoder_transformer_layers
    assert {b.feed_forward.inner_dropout_layer.rate for b in blocks} == {rate}
    assert backbone.encoder_final_dropout.rate == rate
    assert backbone.decoder_final_dropout.rate == rate
    assert backbone.dropout == rate

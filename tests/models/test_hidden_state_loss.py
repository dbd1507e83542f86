"""`CausalLM.fit` computes its loss from the hidden states: same training."""

import doctest

import keras
import numpy as np
import pytest

from keras_tfm.models import CausalLM, DecoderBackbone, Seq2SeqBackbone, Seq2SeqLM
from keras_tfm.models import hidden_state_loss as loss_module
from keras_tfm.training import TokenCrossEntropy

VOCABULARY = 37
RNG = np.random.default_rng(1)
IDS = RNG.integers(1, VOCABULARY, (8, 12))
LABELS = RNG.integers(0, VOCABULARY, (8, 12))
WEIGHTS = (RNG.random((8, 12)) > 0.3).astype("float32")


def small_lm(**kwargs):
    keras.utils.set_random_seed(0)
    backbone = DecoderBackbone(
        vocabulary_size=VOCABULARY, num_layers=2, num_heads=2, hidden_dim=16,
        intermediate_dim=32, max_sequence_length=16,
    )  # fmt: skip
    return CausalLM(backbone, **kwargs)


def fitted(model, setting, loss, metrics=None):
    model.loss_from_hidden_states = setting
    model.compile(keras.optimizers.SGD(0.5), loss=loss, metrics=metrics)
    history = model.fit(IDS, LABELS, sample_weight=WEIGHTS, batch_size=4,
                        epochs=2, shuffle=False, verbose=0)  # fmt: skip
    return history.history, model.get_weights()


LOSSES = {
    "smoothed-ignoring": lambda: TokenCrossEntropy(ignore_class=3, label_smoothing=0.1),
    "keras-mean-weighted": lambda: keras.losses.SparseCategoricalCrossentropy(
        from_logits=True, reduction="mean_with_sample_weight"
    ),
}


@pytest.mark.parametrize("tied", [True, False], ids=["tied", "lm_head"])
@pytest.mark.parametrize("loss", sorted(LOSSES))
def test_trains_as_the_logits_do(loss, tied):
    accuracy = keras.metrics.SparseCategoricalAccuracy
    model = small_lm(tie_word_embeddings=tied)
    plain, plain_weights = fitted(model, False, LOSSES[loss](), [accuracy()])
    assert not model.trains_on_hidden_states()
    model = small_lm(tie_word_embeddings=tied)
    fused, fused_weights = fitted(model, True, LOSSES[loss](), [accuracy()])
    assert model.trains_on_hidden_states()
    # The metrics see the logits of the weights before each step's update.
    for name in plain:
        np.testing.assert_allclose(fused[name], plain[name], rtol=1e-5, err_msg=name)
    moved = max(np.abs(a - b).max() for a, b in zip(plain_weights, small_lm(
        tie_word_embeddings=tied).get_weights(), strict=True))  # fmt: skip
    assert moved > 1e-3
    for a, b in zip(fused_weights, plain_weights, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
    # A call and predict still give the logits.
    assert model(IDS[:1], training=True).shape == (1, 12, VOCABULARY)
    assert model.predict(IDS[:1], verbose=0).shape == (1, 12, VOCABULARY)


def test_the_logits_path_where_the_hidden_states_cannot_stand_in(monkeypatch):
    model = small_lm()
    model.compile("sgd", loss=TokenCrossEntropy())
    assert not model.trains_on_hidden_states()  # "auto": 37 words are few
    monkeypatch.setattr("keras_tfm.models.causal_lm.MIN_VOCABULARY_SIZE", 16)
    assert model.trains_on_hidden_states()
    others = ("sparse_categorical_crossentropy", TokenCrossEntropy(from_logits=False),
              keras.losses.SparseCategoricalCrossentropy())  # fmt: skip
    for other in others:
        model.compile("sgd", loss=other)
        assert not model.trains_on_hidden_states(), other
    model.compile("sgd", loss=TokenCrossEntropy())
    model.backbone.token_embedding.logit_soft_cap = 30.0
    assert not model.trains_on_hidden_states()
    model.loss_from_hidden_states = "yes"
    with pytest.raises(ValueError, match="True, False or 'auto'"):
        model.trains_on_hidden_states()


def test_switching_the_setting_retraces_the_step():
    model = small_lm()
    _, by_hidden = fitted(model, True, TokenCrossEntropy(ignore_class=None))
    model.set_weights(small_lm().get_weights())
    _, by_logits = fitted(model, False, TokenCrossEntropy(ignore_class=None))
    for a, b in zip(by_hidden, by_logits, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
    model.loss_from_hidden_states = True
    model.fit(IDS, LABELS, epochs=1, verbose=0)
    assert model(IDS[:1], training=True).shape == (1, 12, VOCABULARY)


def test_a_sequence_to_sequence_model_trains_as_on_its_logits():
    weights = []
    for on_hidden in (False, True):
        keras.utils.set_random_seed(0)
        backbone = Seq2SeqBackbone(
            vocabulary_size=VOCABULARY, num_encoder_layers=1, num_decoder_layers=1,
            num_heads=2, hidden_dim=16, intermediate_dim=32, max_sequence_length=16,
        )  # fmt: skip
        model = Seq2SeqLM(backbone, scale_decoder_outputs=True, start_token_id=1)
        model.loss_from_hidden_states = on_hidden
        model.compile(keras.optimizers.SGD(0.5), TokenCrossEntropy(ignore_class=0))
        inputs = {"source_ids": IDS, "target_ids": IDS[:, ::-1]}
        model.fit(inputs, LABELS, batch_size=4, epochs=2, shuffle=False, verbose=0)
        assert model.trains_on_hidden_states() == on_hidden
        weights.append(model.get_weights())
    for a, b in zip(*weights, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def test_a_sequence_to_sequence_head_folds_its_scale_into_the_table():
    keras.utils.set_random_seed(0)
    backbone = Seq2SeqBackbone(
        vocabulary_size=VOCABULARY, num_encoder_layers=1, num_decoder_layers=1,
        num_heads=2, hidden_dim=16,
        intermediate_dim=32, max_sequence_length=16,
    )  # fmt: skip
    model = Seq2SeqLM(backbone, scale_decoder_outputs=True)
    hidden = np.random.default_rng(0).normal(size=(2, 3, 16)).astype("float32")
    np.testing.assert_allclose(
        hidden @ keras.ops.convert_to_numpy(model.output_table()).T,
        model.logits(hidden), rtol=1e-5, atol=1e-6,
    )  # fmt: skip


def test_rematerialized_blocks_train_the_same_weights():
    weights = []
    for recompute in (False, True):
        model = small_lm()
        model.backbone.rematerialize_blocks = recompute
        weights.append(fitted(model, True, TokenCrossEntropy(ignore_class=None))[1])
    for a, b in zip(*weights, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def test_docstring_examples_run():
    globs = {"np": np, "keras": keras}
    result = doctest.testmod(loss_module, extraglobs=globs)
    assert result.attempted > 0 and result.failed == 0


def test_labels_of_another_shape_are_refused_by_both_losses():
    keras_loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    hidden, table = np.zeros((2, 3, 4), "float32"), np.zeros((5, 4), "float32")
    with pytest.raises(ValueError, match=r"shape of hidden without.*\(2, 4\)"):
        loss_module.hidden_state_loss(keras_loss, np.zeros((2, 4)), hidden, table)
    with pytest.raises(ValueError, match=r"shape of y_pred without.*\(2, 4\)"):
        TokenCrossEntropy()(np.zeros((2, 4)), np.zeros((2, 3, 5), "float32"))
    with pytest.raises(ValueError, match="reproduces a sparse cross-entropy"):
        loss_module.hidden_state_loss("mse", np.zeros((2, 3)), hidden, table)


def test_a_rematerialize_setting_that_is_not_a_flag_is_refused():
    model = small_lm()
    model.backbone.rematerialize_blocks = "auto"
    model.compile("sgd", loss=TokenCrossEntropy())
    with pytest.raises(ValueError, match="rematerialize_blocks` must be True or False"):
        model.fit(IDS, LABELS, epochs=1, verbose=0)

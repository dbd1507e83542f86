"""Language models check their label ids against the vocabulary (issue 37, item 5).

An id at or past the vocabulary size otherwise fails deep in the graph
("Graph execution error") or, under XLA and on a GPU, silently gives a NaN
loss: `Task.fit` checks arrays before training and datasets inside the
input pipeline, which XLA does not compile.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_tfm import training
from tests.builders import causal_lm, seq2seq_lm

SMALL = dict(num_heads=2, hidden_dim=8, intermediate_dim=16, vocabulary_size=20)
X = np.ones((4, 8), "int32")


def compiled(model):
    model.compile("adam", training.TokenCrossEntropy(), jit_compile=True)
    return model


@pytest.fixture(scope="module")
def causal():
    """One compiled model for the causal tests: its train and test functions
    trace (and XLA compiles them) once per batch shape for the file."""
    return compiled(causal_lm(num_layers=1, max_sequence_length=8, **SMALL))


@pytest.mark.parametrize("bad", [20, 99, -1])
def test_causal_lm_refuses_array_labels_outside_the_vocabulary(bad, causal):
    labels = np.ones((4, 8), "int32")
    labels[2, 5] = bad
    with pytest.raises(ValueError, match=r"token ids in \[0, 20\) for vocabulary_size"):
        causal.fit(X, labels, verbose=0)


def test_causal_lm_refuses_dataset_labels_outside_the_vocabulary_under_xla(causal):
    labels = np.ones((4, 8), "int32")
    labels[3, 0] = 20
    data = tf.data.Dataset.from_tensor_slices((X, labels)).batch(2)
    with pytest.raises(ValueError, match="in a batch of the dataset"):
        causal.fit(data, verbose=0)
    with pytest.raises(ValueError, match="labels from 1 to 20"):
        causal.evaluate(data, verbose=0)


def test_good_labels_train_and_the_loss_is_finite(causal):
    history = causal.fit(X, np.full((4, 8), 3, "int32"), epochs=2, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))


def test_seq2seq_lm_checks_its_labels_too():
    model = compiled(
        seq2seq_lm(num_encoder_layers=1, num_decoder_layers=1,
                   max_sequence_length=8, start_token_id=1, **SMALL)
    )  # fmt: skip
    inputs = {"source_ids": X, "target_ids": X}
    with pytest.raises(ValueError, match="vocabulary_size=20"):
        model.fit(inputs, np.full((4, 8), 25, "int32"), verbose=0)
    keras.utils.set_random_seed(0)
    model.fit(inputs, np.full((4, 8), 5, "int32"), verbose=0)


def test_masked_lm_checks_its_labels_too():
    from keras_tfm.models import EncoderBackbone, MaskedLanguageModel

    backbone = EncoderBackbone(num_layers=1, max_sequence_length=8, **SMALL)
    model = compiled(MaskedLanguageModel(backbone))
    inputs = {"token_ids": X, "mask_positions": np.array([[1, 2]] * 4)}
    with pytest.raises(ValueError, match=r"token ids in \[0, 20\)"):
        model.fit(inputs, np.full((4, 2), 21, "int32"), verbose=0)

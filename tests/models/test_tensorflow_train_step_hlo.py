"""The TensorFlow `jit_compile=True` train step of a causal LM, as `fit` traces
it, read in XLA's optimized HLO: the tensors a GPU would have to hold."""

import re

import keras
import numpy as np
import pytest

from keras_tfm import models
from keras_tfm.training import TokenCrossEntropy

tf = pytest.importorskip("tensorflow")
pytestmark = pytest.mark.skipif(
    keras.backend.backend() != "tensorflow", reason="TensorFlow's train step"
)
BATCH, HEADS, VOCABULARY = 8, 4, 4096


def _float_shapes(seq):
    """The float32/bfloat16 shapes in the optimized HLO of one train step."""
    lm = models.CausalLM(models.DecoderBackbone(
        vocabulary_size=VOCABULARY, num_layers=1, num_heads=HEADS, hidden_dim=32,
        intermediate_dim=64, max_sequence_length=seq, padding_id=None,
    ))  # fmt: skip
    lm.compile(keras.optimizers.AdamW(1e-3), TokenCrossEntropy(), jit_compile=True)
    ids = tf.zeros((BATCH, seq), tf.int32)
    with lm._fitting():  # what `fit` opens: the loss from the hidden states
        assert lm.trains_on_hidden_states()
        lm.optimizer.build(lm.trainable_variables)
        step = tf.function(lm.train_step, jit_compile=True)
        hlo = step.experimental_get_compiler_ir((ids, ids))(stage="optimized_hlo")
    shapes = re.findall(r"\b(?:f32|bf16)\[([\d,]+)\]", hlo)
    return {tuple(int(d) for d in s.split(",")) for s in shapes}


def test_a_1024_token_step_forms_no_attention_square_and_no_logits():
    seq = 1024
    shapes = _float_shapes(seq)
    assert not [s for s in shapes if s[-2:] == (seq, seq)]
    whole_logits = BATCH * seq * VOCABULARY
    largest = max(int(np.prod(s)) for s in shapes)
    assert largest < whole_logits, largest
    # The reading finds such tensors where they are formed: a short step's
    # attention weights, (batch, heads, seq, seq).
    assert (BATCH, HEADS, 16, 16) in _float_shapes(16)

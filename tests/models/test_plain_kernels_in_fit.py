"""Strings whose preprocessed rows stay short train on the plain kernels.

Batches of strings have lengths unknown when TensorFlow traces the step;
where the preprocessor's `sequence_length` keeps every row below the
length at which attention and the feed-forward network tile, `fit`,
`evaluate` and `predict` trace only the plain computations (no run-time
choice, no tiled kernel traced); a longer `sequence_length` keeps both.
"""

import keras
import keras_hub
import pytest

from keras_tfm.kernels import attention
from keras_tfm.layers import feed_forward
from keras_tfm.models.task import TILED_MIN_LENGTH
from tests.builders import causal_lm

TEXTS = ["abc", "hello there", "x"]


def _traced_tiled_kernels(monkeypatch, sequence_length, run):
    traced = set()
    tiled_attention = attention.chunked_dot_product_attention
    chunked_ffn = feed_forward.chunked_feed_forward

    def attention_spy(*args, **kwargs):
        traced.add("attention")
        return tiled_attention(*args, **kwargs)

    def ffn_spy(*args, **kwargs):
        traced.add("feed-forward")
        return chunked_ffn(*args, **kwargs)

    monkeypatch.setattr(attention, "chunked_dot_product_attention", attention_spy)
    monkeypatch.setattr(feed_forward, "chunked_feed_forward", ffn_spy)
    keras.utils.set_random_seed(0)
    model = causal_lm(
        vocabulary_size=256, num_layers=1, num_heads=2, hidden_dim=16,
        intermediate_dim=32, max_sequence_length=2048, position_encoding="rotary",
        padding_id=0, tokenizer=keras_hub.tokenizers.ByteTokenizer(),
    )  # fmt: skip
    model.preprocessor.sequence_length = sequence_length
    model.compile(
        optimizer="adam",
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=False,
    )
    run(model)
    return traced


RUNS = {
    "fit": lambda m: m.fit(TEXTS, batch_size=2, epochs=1, verbose=0),
    "fit on chats": lambda m: m.fit(
        [("hi", "ho"), ("a question", "an answer")], batch_size=2, verbose=0
    ),
    "evaluate": lambda m: m.evaluate(TEXTS, batch_size=2, verbose=0),
}


@pytest.mark.skipif(
    keras.backend.backend() != "tensorflow",
    reason="other backends trace every batch at its own known length",
)
@pytest.mark.parametrize("run", RUNS, ids=list(RUNS))
def test_short_rows_trace_only_the_plain_kernels(monkeypatch, run):
    assert not _traced_tiled_kernels(monkeypatch, 64, RUNS[run])
    # A preprocessor whose rows may reach the tiled length keeps the choice.
    traced = _traced_tiled_kernels(monkeypatch, TILED_MIN_LENGTH, RUNS[run])
    assert traced == {"attention", "feed-forward"}

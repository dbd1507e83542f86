"""Writes tests/fixtures/legacy/: tiny `.keras` files saved by the code before
the Backbone/Task split (run it from a checkout of commit a0892ae), and the
outputs that code gave, which tests/models/test_legacy_files.py compares with.

Usage (from the old checkout): python tools/make_legacy_fixtures.py OUT_DIR
"""

import json
import sys
from pathlib import Path

import keras
import numpy as np

import keras_tfm

TEXTS = ["in the beginning god created the heaven and the earth"] * 4 + [
    "ich habe einen hund", "i have a dog", "der hund ist gross", "the dog is big",
]


def main(out):
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    keras.utils.set_random_seed(0)
    words = keras_tfm.data.train_word_piece_tokenizer(TEXTS, vocabulary_size=60)
    causal = keras_tfm.models.CausalLM(
        vocabulary_size=words.vocabulary_size(), num_layers=1, num_heads=2,
        hidden_dim=16, intermediate_dim=32, max_sequence_length=32,
        tie_word_embeddings=False, tokenizer=words,
    )
    seq2seq = keras_tfm.models.Seq2SeqTransformer(
        vocabulary_size=words.vocabulary_size(), num_encoder_layers=1,
        num_decoder_layers=1, num_heads=2, hidden_dim=16, intermediate_dim=32,
        max_sequence_length=16, use_logits_bias=True, tokenizer=words,
    )
    ids = np.array([[5, 6, 7, 8]])
    expected = {
        "causal_logits": np.asarray(causal(ids)).tolist(),
        "causal_text": causal.generate("in the", max_new_tokens=6),
        "seq2seq_logits": np.asarray(
            seq2seq({"source_ids": ids, "target_ids": ids[:, :2]})
        ).tolist(),
        "seq2seq_text": seq2seq.generate("ich habe", max_new_tokens=6),
    }
    causal.save(out / "causal_lm.keras")
    seq2seq.save(out / "seq2seq_transformer.keras")
    (out / "expected.json").write_text(json.dumps(expected))


if __name__ == "__main__":
    main(sys.argv[1])

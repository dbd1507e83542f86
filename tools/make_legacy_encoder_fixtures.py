"""Writes `.keras` files of the encoder tasks as they were before issue 36.

Until issue 36, `EncoderClassifier`, `SentenceEncoder` and
`MaskedLanguageModel` held their tokenizer as `tokenizer=` (no
preprocessor). `tests/models/test_legacy_encoder_files.py` checks that
`keras_tfm.saving.load_model` still reads such files, with the same outputs.
Run this on a checkout of the old code (commit 548784b), e.g.

    git archive 548784b | tar -x -C /tmp/old
    PYTHONPATH=/tmp/old python tools/make_legacy_encoder_fixtures.py

It writes tests/fixtures/legacy_encoders/{classifier,sentence_encoder,
masked_lm}.keras and expected.npz (each model's outputs on `TEXTS`).
"""

import sys
from pathlib import Path

import numpy as np

import keras_tfm

OUT = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "legacy_encoders"
TEXTS = ["the cat sat on the mat", "a dog ran", "the mat"]
CORPUS = TEXTS + ["the dog sat", "a cat ran on the mat", "dogs and cats"]


def main():
    if hasattr(keras_tfm.models, "TextClassifierPreprocessor"):
        sys.exit("Run this on the code before issue 36 (see the docstring).")
    import keras

    keras.utils.set_random_seed(7)
    OUT.mkdir(parents=True, exist_ok=True)
    tokenizer = keras_tfm.data.train_word_piece_tokenizer(CORPUS, vocabulary_size=40)
    vocabulary_size = tokenizer.vocabulary_size()

    def backbone():
        return keras_tfm.models.EncoderBackbone(
            vocabulary_size=vocabulary_size, num_layers=1, num_heads=2,
            hidden_dim=8, intermediate_dim=16, max_sequence_length=12,
        )

    classifier = keras_tfm.models.EncoderClassifier(
        backbone(), num_classes=3, pooling="mean", tokenizer=tokenizer,
        class_names=["a", "b", "c"],
    )
    # all-MiniLM's kind of tokenizer (BERT's, with cls/sep/pad ids).
    bert_tokenizer = keras_tfm.convert.HFBertTokenizer(
        tokenizer.get_vocabulary(), lowercase=True
    )
    encoder = keras_tfm.models.SentenceEncoder(
        backbone(), tokenizer=bert_tokenizer, max_sequence_length=10
    )
    mlm = keras_tfm.models.MaskedLanguageModel(backbone(), tokenizer=tokenizer)
    expected = {
        # Probabilities by class index (classify lists them best first).
        "classify": np.asarray(
            [
                [dict(row)[name] for name in classifier.class_names]
                for row in classifier.classify(TEXTS, top_k=3)
            ]
        ),
        "predict": classifier.predict(TEXTS, verbose=0),
        "encode": encoder.encode(TEXTS),
        "fill_mask": np.asarray(
            [c["probability"] for c in mlm.fill_mask("the [MASK] sat", top_k=5)]
        ),
    }
    classifier.save(OUT / "classifier.keras")
    encoder.save(OUT / "sentence_encoder.keras")
    mlm.save(OUT / "masked_lm.keras")
    np.savez(OUT / "expected.npz", **expected)
    print(f"Wrote {sorted(p.name for p in OUT.iterdir())} to {OUT}")


if __name__ == "__main__":
    main()

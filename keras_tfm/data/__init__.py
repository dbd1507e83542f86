"""Data: the default corpus shipped with the package and `tf.data` pipelines."""

from keras_tfm.data.bible import load_bible
from keras_tfm.data.bucketing import batch_by_length, length_buckets
from keras_tfm.data.default_corpus import default_corpus_path, load_default_corpus
from keras_tfm.data.detokenization import detokenize, join_word_pieces
from keras_tfm.data.fortunes import (
    classification_dataset,
    classify_texts,
    fortune_splits,
    load_fortunes,
)
from keras_tfm.data.language_modeling import language_model_datasets
from keras_tfm.data.tokenizers import (
    encode_for_classification,
    train_word_piece_tokenizer,
)
from keras_tfm.data.translation import (
    load_translation_pairs,
    split_translation_pairs,
    train_translation_tokenizer,
    translation_dataset,
)

__all__ = [
    "batch_by_length",
    "classification_dataset",
    "classify_texts",
    "default_corpus_path",
    "detokenize",
    "encode_for_classification",
    "fortune_splits",
    "join_word_pieces",
    "language_model_datasets",
    "length_buckets",
    "load_bible",
    "load_default_corpus",
    "load_fortunes",
    "load_translation_pairs",
    "split_translation_pairs",
    "train_translation_tokenizer",
    "train_word_piece_tokenizer",
    "translation_dataset",
]

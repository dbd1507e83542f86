"""Data pipelines: bucketing, language-model windows, tokenizer training.

The corpora themselves are loaded by `keras_tfm.datasets`.
"""

from keras_tfm.data.bucketing import batch_by_length, length_buckets
from keras_tfm.data.byte_pair_tokenizer import train_byte_pair_tokenizer
from keras_tfm.data.classification import classification_dataset
from keras_tfm.data.detokenization import detokenize, join_word_pieces
from keras_tfm.data.language_modeling import (
    interleaved_split,
    language_model_datasets,
    next_token_windows,
    split_at_line,
    window_dataset,
)
from keras_tfm.data.tokenizers import (
    encode_for_classification,
    train_word_piece_tokenizer,
)
from keras_tfm.data.translation import (
    train_translation_tokenizer,
    translation_dataset,
)

__all__ = [
    "batch_by_length",
    "classification_dataset",
    "detokenize",
    "encode_for_classification",
    "interleaved_split",
    "join_word_pieces",
    "language_model_datasets",
    "length_buckets",
    "next_token_windows",
    "split_at_line",
    "train_byte_pair_tokenizer",
    "train_translation_tokenizer",
    "train_word_piece_tokenizer",
    "translation_dataset",
    "window_dataset",
]

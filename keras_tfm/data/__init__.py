"""Data: the default corpus shipped with the package and `tf.data` pipelines."""

from keras_tfm.data.default_corpus import default_corpus_path, load_default_corpus
from keras_tfm.data.language_modeling import language_model_datasets

__all__ = ["default_corpus_path", "language_model_datasets", "load_default_corpus"]

"""Simple baselines that need no model, to put beside a trained model's result.

Example:
>>> from keras_tfm import baselines
>>> baselines.compression_nats_per_byte(b"abc" * 100, b"abc" * 10) < 0.5
True
"""

from keras_tfm.baselines.compression import (
    compression_nats_per_byte as compression_nats_per_byte,
)
from keras_tfm.baselines.compression import (
    held_out_nats_per_byte as held_out_nats_per_byte,
)
from keras_tfm.baselines.dictionary_translator import (
    DictionaryTranslator as DictionaryTranslator,
)
from keras_tfm.baselines.ibm_model import ibm_model1 as ibm_model1
from keras_tfm.baselines.ibm_model import (
    ibm_model1_translator as ibm_model1_translator,
)
from keras_tfm.baselines.text_classifier import tfidf_classifier as tfidf_classifier

__all__ = [
    "DictionaryTranslator",
    "compression_nats_per_byte",
    "held_out_nats_per_byte",
    "ibm_model1",
    "ibm_model1_translator",
    "tfidf_classifier",
]

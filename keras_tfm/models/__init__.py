"""The three Transformer families built from `keras_tfm.layers`."""

from keras_tfm.models.encoder_backbone import EncoderBackbone as EncoderBackbone
from keras_tfm.models.encoder_classifier import EncoderClassifier as EncoderClassifier
from keras_tfm.models.masked_language_model import (
    MaskedLanguageModel as MaskedLanguageModel,
)
from keras_tfm.models.masked_lm_masker import MaskedLMMasker as MaskedLMMasker

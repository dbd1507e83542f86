"""The three Transformer families built from `keras_tfm.layers`."""

from keras_tfm.models.causal_lm import CausalLM as CausalLM
from keras_tfm.models.encoder_backbone import EncoderBackbone as EncoderBackbone
from keras_tfm.models.encoder_classifier import EncoderClassifier as EncoderClassifier
from keras_tfm.models.masked_language_model import (
    MaskedLanguageModel as MaskedLanguageModel,
)
from keras_tfm.models.masked_lm_masker import MaskedLMMasker as MaskedLMMasker
from keras_tfm.models.masked_lm_preprocessor import (
    MaskedLMPreprocessor as MaskedLMPreprocessor,
)
from keras_tfm.models.quantization import (
    int8_weight_only_config as int8_weight_only_config,
)
from keras_tfm.models.sentence_encoder import SentenceEncoder as SentenceEncoder
from keras_tfm.models.seq2seq_transformer import (
    Seq2SeqTransformer as Seq2SeqTransformer,
)
from keras_tfm.models.text_classifier_preprocessor import (
    TextClassifierPreprocessor as TextClassifierPreprocessor,
)

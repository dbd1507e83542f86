"""Backbones, tasks and preprocessors: the three Transformer families.

A backbone is the family's layers (`EncoderBackbone`, `DecoderBackbone`,
`Seq2SeqBackbone`); a task wraps a backbone with a head and a preprocessor
(`EncoderClassifier`, `MaskedLanguageModel`, `SentenceEncoder`, `CausalLM`,
`Seq2SeqLM`; `VisionTransformer` reads images with the encoder's blocks);
a preprocessor owns the tokenizer and the packing of its ids
and is the only place strings are seen. Every backbone and task has
`from_preset`.
"""

import keras

from keras_tfm.data.masked_lm_masker import MaskedLMMasker as MaskedLMMasker
from keras_tfm.models.causal_lm import CausalLM as CausalLM
from keras_tfm.models.causal_lm_preprocessor import (
    CausalLMPreprocessor as CausalLMPreprocessor,
)
from keras_tfm.models.decoder_backbone import DecoderBackbone as DecoderBackbone
from keras_tfm.models.encoder_backbone import EncoderBackbone as EncoderBackbone
from keras_tfm.models.encoder_classifier import EncoderClassifier as EncoderClassifier
from keras_tfm.models.masked_language_model import (
    MaskedLanguageModel as MaskedLanguageModel,
)
from keras_tfm.models.masked_lm_preprocessor import (
    MaskedLMPreprocessor as MaskedLMPreprocessor,
)
from keras_tfm.models.preprocessor import Preprocessor as Preprocessor
from keras_tfm.models.quantization import (
    int8_weight_only_config as int8_weight_only_config,
)
from keras_tfm.models.sentence_encoder import SentenceEncoder as SentenceEncoder
from keras_tfm.models.seq2seq_backbone import Seq2SeqBackbone as Seq2SeqBackbone
from keras_tfm.models.seq2seq_lm import Seq2SeqLM as Seq2SeqLM
from keras_tfm.models.seq2seq_lm_preprocessor import (
    Seq2SeqLMPreprocessor as Seq2SeqLMPreprocessor,
)
from keras_tfm.models.task import Task as Task
from keras_tfm.models.text_classifier_preprocessor import (
    TextClassifierPreprocessor as TextClassifierPreprocessor,
)
from keras_tfm.models.vision_transformer import (
    VisionTransformer as VisionTransformer,
)

# `.keras` files and presets written before the split name the
# sequence-to-sequence model "Seq2SeqTransformer" (a flat config, which
# `Seq2SeqLM.from_config` splits).
keras.saving.get_custom_objects()["keras_tfm>Seq2SeqTransformer"] = Seq2SeqLM

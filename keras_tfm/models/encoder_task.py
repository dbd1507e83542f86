"""The base of the tasks on an `EncoderBackbone`, written once."""

from keras_tfm.models.encoder_backbone import EncoderBackbone
from keras_tfm.models.task import (
    Task,
    check_backbone,
    deserialize_parts,
    restore_preprocessor,
)
from keras_tfm.models.text_classifier_preprocessor import TextClassifierPreprocessor
from keras_tfm.models.text_inputs import (
    check_preprocessor,
    check_sequence_length,
    check_texts,
    refuse_tokenizer,
)


class EncoderTask(Task):
    """Base of `EncoderClassifier`, `MaskedLanguageModel` and `SentenceEncoder`.

    Checks and stores their two parts: an `EncoderBackbone`, and an
    optional preprocessor (a `Preprocessor`, or its serialized dict) that
    packs rows no longer than the backbone reads. The `tokenizer=` these
    tasks took until issue 36 is refused with the `preprocessor_class` to
    build instead, and `from_config` builds one around the tokenizer of a
    file saved then.

    Args:
        backbone: an `EncoderBackbone`.
        preprocessor: None (the task reads token ids only), a
            `preprocessor_class`, or its serialized dict.
        **kwargs: the Keras arguments (`name`, `dtype`, ...).
    """

    preprocessor_class = TextClassifierPreprocessor

    def __init__(self, backbone, preprocessor=None, **kwargs):
        task, preprocessor_class = type(self).__name__, self.preprocessor_class
        refuse_tokenizer(kwargs, task, preprocessor_class.__name__)
        check_backbone(backbone, EncoderBackbone)
        super().__init__(**kwargs)
        self.backbone = backbone
        self.preprocessor = check_sequence_length(
            restore_preprocessor(preprocessor), backbone
        )

    def _read_texts(self, texts):
        """`(texts, single)`: a string or a list of strings, as a list.

        Raises a ValueError naming the fix when the task has no preprocessor
        to read them.
        """
        texts, single = check_texts("texts", texts)
        check_preprocessor(self, "texts", texts)
        return texts, single

    @classmethod
    def _deserialize_parts(cls, config, sequence_length=None):
        """`config` with its backbone and preprocessor deserialized."""
        return deserialize_parts(config, cls.preprocessor_class, sequence_length)

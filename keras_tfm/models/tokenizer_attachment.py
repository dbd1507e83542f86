"""A keras-hub tokenizer attached to a model and saved with it.

A model that takes `tokenizer=` stores the tokenizer layer as an attribute, so
Keras saves its vocabulary as assets of the `.keras` file, and puts its
serialized config in `get_config()`, so `from_config` rebuilds it.
"""

import keras


def restore_tokenizer(tokenizer):
    """`None`, a tokenizer layer, or the dict `serialize_tokenizer` made."""
    if isinstance(tokenizer, dict):
        return keras.saving.deserialize_keras_object(tokenizer)
    return tokenizer


def serialize_tokenizer(tokenizer):
    """The config entry for `tokenizer` (`None` when there is none)."""
    if tokenizer is None:
        return None
    return keras.saving.serialize_keras_object(tokenizer)

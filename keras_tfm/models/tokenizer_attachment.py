"""A keras-hub tokenizer attached to a model and saved with it.

A model that takes `tokenizer=` stores the tokenizer layer as an attribute, so
Keras saves its vocabulary as assets of the `.keras` file, and puts its
serialized config in `get_config()`, so `from_config` rebuilds it. The
helpers below let such a model take raw strings: they recognise text input,
refuse it clearly without a tokenizer, and find the special tokens
(`[START]`, `[END]`, `[MASK]`, ...) a tokenizer knows.
"""

import keras
import numpy as np

# Names of the end-of-sequence token in the tokenizers keras-tfm ships or
# converts: its own WordPiece vocabularies, BERT's, GPT-2's and SmolLM2's.
END_TOKENS = ("[END]", "</s>", "<|endoftext|>", "<|im_end|>")
START_TOKENS = ("[START]", "<s>", "[CLS]")


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


def is_text(inputs):
    """Whether `inputs` is a string or a non-empty list/array of strings."""
    if isinstance(inputs, str | bytes):
        return True
    if isinstance(inputs, np.ndarray):
        return (
            inputs.dtype.kind in "USO"
            and inputs.size > 0
            and is_text(inputs.reshape(-1)[0])
        )
    return (
        isinstance(inputs, list | tuple)
        and len(inputs) > 0
        and all(isinstance(x, str | bytes) for x in inputs)
    )


def text_list(name, inputs, tokenizer, model):
    """`(texts, single)`: the strings of `inputs` as a list, and whether one.

    Raises a ValueError naming the fix when `model` has no tokenizer.
    """
    if tokenizer is None:
        raise ValueError(
            f"`{name}` holds strings but this {type(model).__name__} has no "
            "`tokenizer` to read them. Build it with `tokenizer=` (a keras-hub "
            "tokenizer), or pass token ids instead. Received: "
            f"{name}={str(inputs)[:80]}"
        )
    if isinstance(inputs, np.ndarray):
        inputs = inputs.reshape(-1).tolist()
    single = isinstance(inputs, str | bytes)
    texts = [inputs] if single else list(inputs)
    texts = [t.decode("utf-8") if isinstance(t, bytes) else t for t in texts]
    return texts, single


def special_token_id(tokenizer, candidates):
    """The id of the first of `candidates` in `tokenizer`'s vocabulary, or None.

    Tokenizers with an `end_token_id`/`start_token_id` attribute (keras-hub's
    GPT-2, Llama, ...) are asked by the caller first; this looks the names up.
    """
    if tokenizer is None:
        return None
    try:
        vocabulary = tokenizer.get_vocabulary()
    except (AttributeError, NotImplementedError, ValueError):
        return None
    if not vocabulary:
        return None
    if isinstance(vocabulary, dict):  # byte-pair and byte tokenizers: token -> id
        index = vocabulary
    else:
        index = {token: i for i, token in enumerate(vocabulary)}
    for token in candidates:
        if token in index:
            return index[token]
    return None


def tokenizer_end_id(tokenizer):
    """The tokenizer's end-of-sequence id (`[END]`, `</s>`, ...), or None."""
    if tokenizer is None:
        return None
    value = getattr(tokenizer, "end_token_id", None)
    if isinstance(value, int | np.integer):
        return int(value)
    return special_token_id(tokenizer, END_TOKENS)


def tokenizer_start_id(tokenizer):
    """The tokenizer's start-of-sequence id (`[START]`, `<s>`, ...), or None."""
    if tokenizer is None:
        return None
    value = getattr(tokenizer, "start_token_id", None)
    if isinstance(value, int | np.integer):
        return int(value)
    return special_token_id(tokenizer, START_TOKENS)


def named_token_id(tokenizer, attribute, token):
    """`tokenizer.<attribute>` if it is an id (BERT's `cls_token_id`, ...),
    else the id of `token` in its vocabulary, or None."""
    value = getattr(tokenizer, attribute, None)
    if isinstance(value, int | np.integer):
        return int(value)
    return special_token_id(tokenizer, (token,))

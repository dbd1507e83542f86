"""Checking the text a task's one-line helpers take (`classify`, `encode`, ...).

A task reads strings only through its preprocessor; these checks run first,
so that a wrong type or a missing preprocessor is a ValueError that says
what is accepted, not an error from inside a tokenizer.
"""

import numpy as np


def check_texts(name, inputs):
    """`(texts, single)`: a string or a list of strings as a list, and whether one.

    Bytes are decoded as UTF-8; an empty list gives `([], False)`.

    Example:
    >>> check_texts("texts", "the cat")
    (['the cat'], True)
    >>> check_texts("texts", [12, 54])
    Traceback (most recent call last):
    ...
    ValueError: `texts` must be a string or a list of strings. Received: texts=[12, 54]
    """
    single = isinstance(inputs, str | bytes)
    if single:
        texts = [inputs]
    elif isinstance(inputs, np.ndarray) and inputs.dtype.kind in "USO":
        texts = inputs.reshape(-1).tolist()
    elif isinstance(inputs, list | tuple):
        texts = list(inputs)
    else:
        texts = None
    if texts is None or not all(isinstance(t, str | bytes) for t in texts):
        raise ValueError(
            f"`{name}` must be a string or a list of strings. Received: "
            f"{name}={str(inputs)[:200]}"
        )
    texts = [t.decode("utf-8") if isinstance(t, bytes) else t for t in texts]
    return texts, single


def check_preprocessor(model, name, inputs):
    """Raises a ValueError naming the fix when `model` has no preprocessor."""
    if model.preprocessor is None:
        raise ValueError(
            f"`{name}` holds strings but this {type(model).__name__} has no "
            "`preprocessor` to read them. Build it with `preprocessor=` (e.g. a "
            "`TextClassifierPreprocessor` of a tokenizer), or pass token ids "
            f"instead. Received: {name}={str(inputs)[:80]}"
        )


def check_sequence_length(preprocessor, backbone):
    """`preprocessor`, checked to pack no longer rows than `backbone` reads."""
    length = getattr(preprocessor, "sequence_length", None)
    if length is not None and length > backbone.max_sequence_length:
        raise ValueError(
            f"The preprocessor packs rows of sequence_length={length}, longer "
            f"than the backbone's max_sequence_length="
            f"{backbone.max_sequence_length}. Build it with "
            f"sequence_length<={backbone.max_sequence_length}. Received: "
            f"sequence_length={length}"
        )
    return preprocessor


def refuse_tokenizer(kwargs, task, preprocessor_class):
    """A clear error for the `tokenizer=` the encoder tasks took until issue 36."""
    if "tokenizer" in kwargs:
        raise ValueError(
            f"{task} takes `preprocessor=`, not `tokenizer=`: pass "
            f"preprocessor={preprocessor_class}(tokenizer, sequence_length=...). "
            f"Received: tokenizer={kwargs['tokenizer']!r}"
        )

"""The token inputs of `generate` and `score`: stop ids checked, inputs
normalized to rows of ids (strings tokenized), rows padded into a buffer."""

import keras
import numpy as np


def check_stop_token_ids(stop_token_ids, vocabulary_size):
    """Normalizes `stop_token_ids` (None, an int or a list) to a tuple or None.

    An empty list or tuple means no stop token, as None does.
    """
    if stop_token_ids is None:
        return None
    if isinstance(stop_token_ids, list | tuple) and not stop_token_ids:
        return None
    ids = (stop_token_ids,) if isinstance(stop_token_ids, int) else stop_token_ids
    try:
        ids = tuple(ids)
    except TypeError:
        ids = None
    if not ids or not all(
        isinstance(i, (int, np.integer)) and 0 <= i < vocabulary_size for i in ids
    ):
        raise ValueError(
            "`stop_token_ids` must be None, an id or a list of token ids in "
            f"[0, {vocabulary_size}). Received: stop_token_ids={stop_token_ids!r}"
        )
    return tuple(int(i) for i in ids)


ACCEPTED = (
    "a string or a list of strings (with a preprocessor), a list of token "
    "ids, a list of token-id lists, or a (batch, seq) integer array"
)


def normalize_token_batch(name, inputs, vocabulary_size, padding_id, tokenize):
    """Turns generation inputs into a list of 1-D int64 arrays.

    Accepts a string or a list of strings (read by `tokenize(texts)`, a
    list of id arrays; None when the model has no preprocessor), a list of
    token ids (one sequence), a list of token-id lists of any lengths, or a
    dense (batch, seq) integer array whose `padding_id` entries are padding.
    Returns `(rows, kind)` with `kind` one of "string", "strings", "ids",
    "batch" (how to shape the output).
    """
    if inputs is None or isinstance(inputs, (bytes, dict, set, float, int)):
        raise ValueError(
            f"`{name}` must be {ACCEPTED}. Received: {name}={inputs!r:.80} "
            f"of type {type(inputs).__name__}"
        )
    if isinstance(inputs, str) or (
        isinstance(inputs, (list, tuple))
        and inputs
        and all(isinstance(x, str) for x in inputs)
    ):
        if tokenize is None:
            raise ValueError(
                f"`{name}` are strings but the model has no preprocessor (and "
                "so no tokenizer) to read them. Build it with `preprocessor=`, "
                f"or pass token ids instead. Received: {name}={str(inputs)[:80]}"
            )
        kind = "string" if isinstance(inputs, str) else "strings"
        texts = [inputs] if kind == "string" else list(inputs)
        rows = tokenize(texts)
        for i, (text, row) in enumerate(zip(texts, rows, strict=True)):
            if len(row) == 0:  # said as text: the ids ([]) would not say why
                where = name if kind == "string" else f"{name}[{i}]"
                raise ValueError(
                    f"`{name}` holds an empty prompt: {text!r} is no tokens, and "
                    "generation continues at least one; pass some text. "
                    f"Received: {where}={text!r:.40}"
                )
    elif isinstance(inputs, (list, tuple)) and all(
        isinstance(x, (int, np.integer)) and not isinstance(x, bool) for x in inputs
    ):
        kind, rows = "ids", [np.asarray(inputs)]
    elif isinstance(inputs, (list, tuple)):
        kind, rows = "batch", []
        for i, row in enumerate(inputs):
            if isinstance(row, (str, bytes)):
                raise ValueError(
                    f"`{name}` mixes strings and other items: it must be {ACCEPTED}. "
                    f"Received: {name}[{i}]={row!r:.40}"
                )
            row = np.asarray(row)
            if row.ndim != 1:
                raise ValueError(
                    f"Each item of `{name}` must be a list of token ids. Received: "
                    f"{name}[{i}] of shape {row.shape}"
                )
            rows.append(row)
    else:
        try:
            array = keras.ops.convert_to_numpy(inputs)
        except (TypeError, ValueError) as error:
            raise ValueError(
                f"`{name}` must be {ACCEPTED}. Received: {name}={inputs!r:.80} "
                f"of type {type(inputs).__name__}"
            ) from error
        if array.ndim not in (1, 2):
            raise ValueError(
                f"`{name}` must be {ACCEPTED}. Received: {name}.shape={array.shape}"
            )
        kind = "ids" if array.ndim == 1 else "batch"
        if array.ndim == 1:
            array = array[None]
        rows = [row[row != padding_id] for row in array]
    if not rows:
        raise ValueError(f"`{name}` is empty. Received: {name}={inputs!r}")
    for i, row in enumerate(rows):
        if row.size and not np.issubdtype(row.dtype, np.integer):
            raise ValueError(
                f"`{name}` must hold integer token ids. Received: "
                f"{name}[{i}] of dtype {row.dtype}"
            )
        if row.size == 0:
            raise ValueError(
                f"`{name}` holds an empty sequence: each needs at least one token. "
                f"Received: {name}[{i}]={row.tolist()}"
            )
        if row.min() < 0 or row.max() >= vocabulary_size:
            raise ValueError(
                f"`{name}` holds ids outside [0, {vocabulary_size}). "
                f"Received: {name}[{i}]={row.tolist()}"
            )
    return [row.astype("int64") for row in rows], kind


def pad_rows(rows, length, padding_id):
    """Right-pads rows into a (batch, length) int32 array and a bool mask."""
    tokens = np.full((len(rows), length), padding_id, "int32")
    mask = np.zeros((len(rows), length), bool)
    for i, row in enumerate(rows):
        tokens[i, : len(row)] = row
        mask[i, : len(row)] = True
    return tokens, mask

"""What `generate` returns: the decoded rows shaped like the inputs.

Ids come back as ids (one list for one input), strings as strings
(detokenized by the preprocessor, without the stop token, cut before a
stop string found in the new text); streamed steps become pieces of the
same shape (`stream_pieces`, on the one streamed-text helper
`keras_tfm.lite.stop_text.TextStream`).
"""

import warnings

from keras import ops

from keras_tfm.data.detokenization import detokenize
from keras_tfm.lite.stop_text import TextStream, cut_at_stop_strings


class TruncatedAnswerWarning(UserWarning):
    """A structured answer (`response_format`) that `max_new_tokens` cut
    before its format closed: its text does not parse."""


def warn_if_cut(new_rows, stop_token_ids, max_new_tokens):
    """Warns (`TruncatedAnswerWarning`) when a structured answer's new ids
    hold no stop token: `max_new_tokens` ended it, not the format. Text
    answers hide the stop token, so this is their finish reason; id rows
    show it (the server reads `finish_reason` from them).

    Example:
    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     warn_if_cut([[5, 6, 0], [5, 6]], stop_token_ids=(0,), max_new_tokens=2)
    >>> print(caught[0].message)  # doctest: +ELLIPSIS
    1 of 2 structured answers reached max_new_tokens=2 before the format...
    """
    stops = set(stop_token_ids or ())
    cut = [i for i, row in enumerate(new_rows) if not stops & {int(t) for t in row}]
    if cut:
        warnings.warn(
            f"{len(cut)} of {len(new_rows)} structured answers reached "
            f"max_new_tokens={max_new_tokens} before the format closed (rows "
            f"{cut}): their text does not parse. Pass a larger max_new_tokens.",
            TruncatedAnswerWarning,
            stacklevel=4,
        )


def format_rows(model, rows, kind, stop_token_ids, strings=None, prompts=None):
    """`rows` (lists of ids) shaped as the inputs were (`kind`, see
    `normalize_token_batch`); for strings, each cut before the first of its
    row's `strings` found after its prompt's text (`prompts`)."""
    if kind not in ("string", "strings"):
        return format_outputs(rows, kind, None, stop_token_ids)
    texts = model.preprocessor.generate_postprocess(rows, "strings", stop_token_ids)
    if strings and any(strings):
        # Cut before the stop string, searched in the new text only.
        starts = [0] * len(rows)
        if prompts is not None:
            shown = format_rows(model, prompts, "strings", ())
            starts = [
                len(p) if t.startswith(p) else 0
                for t, p in zip(texts, shown, strict=True)
            ]
        texts = [
            cut_at_stop_strings(text, row_strings, start)
            for text, row_strings, start in zip(texts, strings, starts, strict=True)
        ]
    return texts[0] if kind == "string" else texts


def format_results(model, request, inputs, kind, results):
    """`generate`'s return value of a strategy's `(rows, scores, top)`:
    the outputs, with `(outputs, scores[, top])` when scores were asked."""
    rows, scores, top = results
    skip, stops = inputs.skip, request.stop_token_ids
    rows = [row[skip:] for row in rows]
    prompts = [[int(t) for t in row[skip:]] for row in inputs.rows]
    outputs = format_rows(model, rows, kind, stops, request.stop_strings, prompts)
    if request.regex is not None and kind in ("string", "strings"):
        new = [row[len(prompt) :] for row, prompt in zip(rows, prompts, strict=True)]
        warn_if_cut(new, stops, request.max_new_tokens)
    if not request.return_scores:
        return outputs
    one = kind in ("string", "ids")
    if not request.top_logprobs:
        return outputs, (scores[0] if one else scores)
    return outputs, (scores[0] if one else scores), (top[0] if one else top)


def format_stream(model, request, inputs, kind, steps):
    """The generator of pieces of a streamed strategy's id `steps`."""
    stops = request.stop_token_ids
    return stream_pieces(
        steps,
        [row[inputs.skip :] for row in inputs.rows],
        kind,
        lambda ids: format_rows(model, [ids], "string", stops),
        request.stop_strings,
    )


def stream_pieces(steps, rows, kind, format_row, stop_strings=None):
    """Turns streamed id `steps` into pieces shaped like the outputs.

    For "ids" prompts each piece is a token id, for "batch" a list (None
    where a row has nothing new). For "string" / "strings" prompts a piece
    is each row's new text as its `TextStream` shows it (`format_row(ids)`,
    the non-streamed formatting of a whole row, detokenizes; half a UTF-8
    character and the start of a stop string wait). Joined, the pieces make
    the non-streamed output after the prompt.

    Example:
    >>> def format_row(ids):  # one id a byte
    ...     return bytes(ids).decode("utf-8", "replace")
    >>> steps = [[0xC3], [0xA9], [0x21]]
    >>> list(stream_pieces(iter(steps), [[0x61]], "string", format_row))
    ['é', '!']
    """
    if kind not in ("string", "strings"):
        for new in steps:
            yield new[0] if kind == "ids" else new
        return
    strings = stop_strings or [()] * len(rows)
    streams = [
        TextStream(format_row, row_strings, prompt=row)
        for row, row_strings in zip(rows, strings, strict=True)
    ]

    def shaped(pieces):
        return pieces[0] if kind == "string" else pieces

    for new in steps:
        pieces = [
            "" if token is None else stream.push(token)[0]
            for stream, token in zip(streams, new, strict=True)
        ]
        if any(pieces):
            yield shaped(pieces)
    # Whatever waited (a cut character that stayed cut, the start of a stop
    # string that never came) comes out last.
    pieces = [stream.flush()[0] for stream in streams]
    if any(pieces):
        yield shaped(pieces)


def truncate_at_stop(tokens, start, stop_token_ids):
    """`tokens` up to and including the first stop id at or after `start`."""
    tokens = [int(t) for t in tokens]
    if stop_token_ids:
        for i in range(start, len(tokens)):
            if tokens[i] in stop_token_ids:
                return tokens[: i + 1]
    return tokens


def truncated_lengths_graph(tokens, prompt_mask, stop_token_ids, lengths):
    """`truncate_at_stop` of a (batch, length) tensor, as row lengths:
    `lengths`, or less where a row has a stop id past its prompt (kept).

    Example:
    >>> tokens = np.array([[5, 2, 7, 2, 9]])
    >>> mask = np.array([[True, True, False, False, False]])
    >>> ops.convert_to_numpy(truncated_lengths_graph(tokens, mask, (2,), [5]))
    array([4], dtype=int32)
    """
    stops = ops.convert_to_tensor(stop_token_ids, "int32")
    is_stop = ops.any(ops.cast(tokens, "int32")[:, :, None] == stops, axis=-1)
    is_stop = ops.cast(ops.logical_and(is_stop, ops.logical_not(prompt_mask)), "int32")
    before = ops.cumsum(is_stop, axis=1) - is_stop  # stops strictly before
    kept = ops.sum(ops.cast(before == 0, "int32"), axis=1)
    return ops.minimum(ops.cast(lengths, "int32"), kept)


def format_outputs(rows, kind, tokenizer, stop_token_ids):
    """Outputs shaped like the inputs: strings back to strings.

    Strings are clean text: the stop ids are dropped, and
    `keras_tfm.data.detokenize` drops a WordPiece tokenizer's special tokens
    (`[START]`, `[END]`, `[PAD]`, ...) and rejoins its pieces and punctuation
    ("I've a dog.", not "I ' ve a dog .").
    """
    if kind in ("string", "strings"):
        stops = set(stop_token_ids or ())
        texts = [
            detokenize(tokenizer, [t for t in row if t not in stops]) for row in rows
        ]
        return texts[0] if kind == "string" else texts
    return rows[0] if kind == "ids" else rows

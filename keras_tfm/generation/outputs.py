"""What `generate` returns: the decoded rows shaped like the inputs.

Ids come back as ids (one list for one input), strings as strings
(detokenized by the preprocessor, without the stop token, cut before a
stop string found in the new text); streamed steps become pieces of the
same shape (`sliding_window.stream_pieces`).
"""

from keras_tfm.generation import generation_utils as gen
from keras_tfm.generation import sliding_window
from keras_tfm_lite.stop_text import cut_at_stop_strings


def format_rows(model, rows, kind, stop_token_ids, strings=None, prompts=None):
    """`rows` (lists of ids) shaped as the inputs were (`kind`, see
    `normalize_token_batch`); for strings, each cut before the first of its
    row's `strings` found after its prompt's text (`prompts`)."""
    if kind not in ("string", "strings"):
        return gen.format_outputs(rows, kind, None, stop_token_ids)
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
    if not request.return_scores:
        return outputs
    one = kind in ("string", "ids")
    if not request.top_logprobs:
        return outputs, (scores[0] if one else scores)
    return outputs, (scores[0] if one else scores), (top[0] if one else top)


def format_stream(model, request, inputs, kind, steps):
    """The generator of pieces of a streamed strategy's id `steps`."""
    stops = request.stop_token_ids
    return sliding_window.stream_pieces(
        steps,
        [row[inputs.skip :] for row in inputs.rows],
        kind,
        lambda ids: format_rows(model, [ids], "string", stops),
        request.stop_strings,
    )

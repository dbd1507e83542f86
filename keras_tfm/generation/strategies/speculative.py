"""Speculative decoding: plain greedy output, fewer passes of the model.

The draft (prompt lookup, a smaller model, `DecoderSteps` or a
`SpeculativeDecoder`) proposes tokens that the model verifies in one pass
(`keras_tfm.generation.speculative`). Decoder-only models only.
"""

from keras_tfm.generation.speculative import SpeculativeDecoder


def run(model, request, inputs):
    """`(rows, None, None)`, greedy decoding's rows."""
    draft = request.draft
    if not isinstance(draft, SpeculativeDecoder):
        draft = model.compiled_loops.get(
            ("speculative decoder", draft),
            lambda: SpeculativeDecoder(model, draft),
        )
    rows = draft.decode(inputs.rows, request.max_new_tokens, request.stop_token_ids)
    return rows, None, None

"""The decoding strategies, and `strategy_for`, which picks one per request.

Each strategy is a module with `run(model, request, inputs)`, driving the
model's cached steps (`keras_tfm.generation.cached_steps`):

| strategy | runs | returns |
|---|---|---|
| `speculative` | drafts verified in one pass (`SpeculativeDecoder`) | rows |
| `streamed` | a compiled step at a time, on the host (window slides) | id steps |
| `sliding` | a whole loop per window, past the context window | rows |
| `beam` | beam search's or a keras-hub sampler object's own loop | rows |
| `buffered` | the built-in samplers' loop over one buffer | rows, scores |
| `constrained` | `buffered`'s loop under a token automaton's mask | rows |

Non-streamed strategies return `(rows, scores, top)`: the decoder rows
(the decoder prompt and the new tokens, cut after a stop id), and per row
the new tokens' log-probabilities and alternatives (None where the loop
does not record them). `streamed` returns a generator of steps, each a list
with the new token id of each row (None where nothing is new).

Example:
>>> from keras_tfm.generation import GenerationConfig
>>> from keras_tfm.generation.request import GenerationRequest
>>> request = GenerationRequest([GenerationConfig()], 4, stream=True)
>>> strategy_for(request, None).__name__
'keras_tfm.generation.strategies.streamed'
"""

import collections

from keras_tfm.generation.strategies import (
    beam,
    buffered,
    constrained,
    sliding,
    speculative,
    streamed,
)

DecoderInputs = collections.namedtuple(
    "DecoderInputs", ["encoder_inputs", "rows", "skip"]
)
"""`model.generation_inputs(rows)`: the encoder's inputs (`()` for a
causal LM), the decoder rows, and how many leading decoder tokens are not
returned."""


def strategy_for(request, model):
    """The strategy module that runs a validated `request` on `model`."""
    del model  # every strategy runs on both families' cached steps
    if request.regex is not None:
        return constrained
    if request.draft is not None:
        return speculative
    if request.stream:
        return streamed
    if request.slides:
        return sliding
    if not request.tensor_loop:
        return beam
    return buffered

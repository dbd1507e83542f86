"""Text generation machinery, below the models: samplers and decoding loops.

Greedy, random, top-k and top-p sampling are keras-hub's samplers
(`keras_hub.samplers`); `BeamSearchSampler` adds a length penalty, finished
beams and per-row prompt masks to beam search. `make_sampler` turns
`generate`'s settings into a sampler (refusing settings the sampler would
ignore); `sliding_window` holds the host-side loops for decoding past the
context window and streaming; `CompiledLoops` keeps a model's compiled
loops. `generate` itself is written once, in `keras_tfm.models.CausalLM`,
for both generating families.

Example:
>>> from keras_tfm.generation import BeamSearchSampler
>>> sampler = BeamSearchSampler(num_beams=4, length_penalty=0.6)
"""

from keras_tfm.generation.beam_search_sampler import BeamSearchSampler
from keras_tfm.generation.chat_session import ChatSession
from keras_tfm.generation.compiled_loops import (
    CompiledLoops,
    invalidate_compiled_loops,
)
from keras_tfm.generation.decoder_steps import DecoderSteps
from keras_tfm.generation.generation_utils import SAMPLERS, make_sampler
from keras_tfm.generation.kv_cache_dtype import set_kv_cache_dtype
from keras_tfm.generation.speculative import SpeculativeDecoder

__all__ = [
    "BeamSearchSampler",
    "ChatSession",
    "CompiledLoops",
    "DecoderSteps",
    "SAMPLERS",
    "invalidate_compiled_loops",
    "make_sampler",
    "set_kv_cache_dtype",
    "SpeculativeDecoder",
]

"""Text generation: the beam search sampler and the helpers `generate` uses.

Greedy, random, top-k and top-p sampling are keras-hub's samplers
(`keras_hub.samplers`); `BeamSearchSampler` adds a length penalty, finished
beams and per-row prompt masks to beam search. `sliding_window` holds the
host-side loops of `CausalLM.generate`: decoding past the context window
(the window slides and the cache is re-filled) and streaming.

Example:
>>> from keras_tfm.generation import BeamSearchSampler
>>> sampler = BeamSearchSampler(num_beams=4, length_penalty=0.6)
"""

from keras_tfm.generation.beam_search_sampler import BeamSearchSampler
from keras_tfm.generation.conversation import chat
from keras_tfm.generation.generation_utils import SAMPLERS, make_sampler

__all__ = ["BeamSearchSampler", "SAMPLERS", "chat", "make_sampler"]

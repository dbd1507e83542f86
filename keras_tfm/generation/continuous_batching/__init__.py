"""Continuous batching: requests join and leave a running decode loop.

`SlotDecoder` holds a cache of fixed slots and the two compiled functions
over it (prefill into a slot, decode every slot at its own position),
`slot_sampler` samples each row with its own settings, and `Scheduler`
admits requests into free slots between two decoding calls. The HTTP
server (`keras_tfm.serving`) is built on top (Hugging Face keeps its
`continuous_batching/` beside its generation strategies the same way).
"""

from keras_tfm.generation.continuous_batching.scheduler import (
    MAX_TOP_LOGPROBS,
    Scheduler,
    SlotRequest,
)
from keras_tfm.generation.continuous_batching.slot_decoder import SlotDecoder

__all__ = ["MAX_TOP_LOGPROBS", "Scheduler", "SlotDecoder", "SlotRequest"]

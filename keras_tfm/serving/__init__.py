"""An OpenAI-compatible HTTP server with continuous batching.

`Scheduler` batches concurrent generation requests over the fixed slots
of a `SlotDecoder`; `keras_tfm.serving.app` puts the OpenAI routes in
front of it (`keras-tfm serve MODEL`, docs/serving.md).
"""

from keras_tfm.serving.scheduler import Scheduler, SlotRequest
from keras_tfm.serving.slot_decoder import SlotDecoder

__all__ = ["Scheduler", "SlotDecoder", "SlotRequest"]

"""An OpenAI-compatible HTTP server on continuous batching.

The batching itself (`Scheduler`, `SlotDecoder`, `SlotRequest`) is the
engine's, `keras_tfm.generation.continuous_batching`, re-exported here;
`keras_tfm.serving.app` puts the OpenAI routes in front of it
(`keras-tfm serve MODEL`, docs/serving.md).
"""

from keras_tfm.generation.continuous_batching import (
    Scheduler,
    SlotDecoder,
    SlotRequest,
)

__all__ = ["Scheduler", "SlotDecoder", "SlotRequest"]

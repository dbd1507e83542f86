"""An OpenAI-compatible HTTP server on continuous batching.

The batching itself (`Scheduler`, `SlotDecoder`, `SlotRequest`) is the
engine's, `keras_tfm.generation.continuous_batching`, re-exported here;
`keras_tfm.serving.app` puts the OpenAI routes in front of it
(`keras-tfm serve MODEL`, docs/serving.md).

The re-exports import on first use (PEP 562), so that `keras-tfm serve
--help` parses its options from `keras_tfm.serving.command` without
importing Keras.
"""

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # what the API reference reads; at run time, __getattr__
    from keras_tfm.generation.continuous_batching import (
        Scheduler,
        SlotDecoder,
        SlotRequest,
    )

__all__ = ["Scheduler", "SlotDecoder", "SlotRequest"]


def __getattr__(name):
    if name in __all__:
        engine = importlib.import_module("keras_tfm.generation.continuous_batching")
        return getattr(engine, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))

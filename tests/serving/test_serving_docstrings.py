"""The docstring examples of the serving modules that need no compiled model
(`prompt_logprobs`'s calls a tiny model eagerly).

`Scheduler`'s and `SlotDecoder`'s examples compile a model (seconds each);
`tests/serving/test_scheduler.py` runs the same calls on a shared server.
"""

import doctest

import numpy as np
import pytest

import keras_tfm
from keras_tfm.generation.continuous_batching import prefix_cache, slot_sampler
from keras_tfm.serving import (
    metrics,
    prompt_logprobs,
    text_stream,
    token_logprobs,
)

MODULES = [
    prefix_cache, slot_sampler, text_stream, token_logprobs, metrics,
    prompt_logprobs,
]  # fmt: skip


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_docstring_examples(module):
    result = doctest.testmod(module, extraglobs={"np": np, "keras_tfm": keras_tfm})
    assert result.attempted > 0 and result.failed == 0

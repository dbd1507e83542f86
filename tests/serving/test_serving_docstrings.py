"""The docstring examples of the serving modules that need no compiled model.

`Scheduler`'s and `SlotDecoder`'s examples compile a model (seconds each);
`tests/serving/test_scheduler.py` runs the same calls on a shared server.
"""

import doctest

import numpy as np
import pytest

from keras_tfm.generation.continuous_batching import slot_sampler
from keras_tfm.serving import text_stream, token_logprobs


@pytest.mark.parametrize(
    "module", [slot_sampler, text_stream, token_logprobs], ids=lambda m: m.__name__
)
def test_docstring_examples(module):
    result = doctest.testmod(module, extraglobs={"np": np})
    assert result.attempted > 0 and result.failed == 0

"""SmolLM2-135M in the continuous batch: a request's greedy answer alone
equals its answer beside seven others (issue 42), on the real checkpoint."""

import pytest

from keras_tfm.serving import Scheduler
from tests.serving.conftest import TIMEOUT, greedy_reference, run

QUESTIONS = [
    "What is the capital of France?", "Name three fruits.", "What is 2 + 2?",
    "Say hello.", "What colour is the sky?", "Name a planet.",
    "What do bees make?", "Count to three.",
]  # fmt: skip


@pytest.fixture(scope="module")
def scheduler(smollm2):
    scheduler = Scheduler(smollm2, num_slots=8, max_length=64, steps_per_call=4)
    scheduler.start(warm_up=False)  # its prompts need another prefill length
    yield scheduler
    scheduler.stop(TIMEOUT)


@pytest.mark.slow  # the real SmolLM2 (test_scheduler.py: the tiny model)
def test_smollm2_greedy_alone_equals_beside_seven_others(smollm2, scheduler):
    tokenizer = smollm2.tokenizer
    prompts = [
        [int(i) for i in tokenizer(tokenizer.apply_chat_template(q))] for q in QUESTIONS
    ]
    # The first call compiles SmolLM2's prefill and decoding: a long bound.
    together, _ = run(scheduler, prompts, 5, timeout=900)
    alone, _ = run(scheduler, [prompts[0]], 5)
    assert alone[0] == together[0]
    # The answer is SmolLM2's own greedy one (full uncached passes).
    assert together[0] == greedy_reference(smollm2, prompts[0], 5)
    assert tokenizer.detokenize(together[0]).startswith("The capital of France")

"""Continuous batching: a request's tokens do not depend on its neighbours."""

import threading

import numpy as np
import pytest

from keras_tfm.serving import SlotRequest
from tests.serving.conftest import TIMEOUT, assert_top_n, greedy_reference, run


@pytest.fixture(scope="module")
def scheduler(server):
    """The package server's scheduler (8 slots of 64 positions), driven directly."""
    return server.service.scheduler


def prompts(count, seed):
    rng = np.random.default_rng(seed)
    return [list(rng.integers(3, 260, rng.integers(1, 14))) for _ in range(count)]


def test_greedy_alone_equals_beside_seven_others_and_full_passes(chat_model, scheduler):
    batch = prompts(8, seed=1)
    together, reasons = run(scheduler, batch, 9)
    assert reasons == ["length"] * 8
    for i in (0, 5):
        alone, _ = run(scheduler, [batch[i]], 9)
        assert alone[0] == together[i]
    # ...and the argmax of uncached full passes over each prompt alone.
    for prompt, tokens in zip(batch[:3], together, strict=False):
        assert greedy_reference(chat_model, prompt, 9) == tokens


def test_requests_join_while_others_decode_and_queue_past_the_slots(scheduler):
    # 12 requests for 8 slots, of different lengths: four wait, then join
    # as slots free up; each still gets what it gets alone.
    batch = prompts(12, seed=2)
    lengths = [2 + i % 5 * 4 for i in range(12)]
    together = [None] * 12
    threads = []

    def one(i):
        tokens, _ = run(scheduler, [batch[i]], lengths[i])
        together[i] = tokens[0]

    for i in range(12):
        threads.append(threading.Thread(target=one, args=(i,)))
        threads[-1].start()
    for thread in threads:
        thread.join(TIMEOUT)
    alone, _ = run(scheduler, batch, max(lengths))
    for i in range(12):
        assert together[i] == alone[i][: lengths[i]]


def test_seeded_sampling_alone_equals_beside_others(scheduler):
    batch = prompts(4, seed=3)
    settings = dict(temperature=0.9, top_p=0.95, seed=7)
    together, _ = run(scheduler, batch, 9, **settings)
    alone, _ = run(scheduler, batch[:1], 9, **settings)
    assert alone[0] == together[0]
    other_seed, _ = run(scheduler, batch[:1], 9, **dict(settings, seed=8))
    assert other_seed[0] != together[0]


def test_penalties_and_logprobs_follow_full_passes_row_by_row(chat_model, scheduler):
    # One penalized row beside two plain ones: the penalty stays in its row.
    # Negative penalties (+3 to a token already chosen) make the random
    # model repeat itself, so they change its answer whatever its weights.
    # The top-n alternatives are the raw logits' (before the penalties).
    batch = prompts(3, seed=4)
    settings = [dict(presence_penalty=-1.0, frequency_penalty=-2.0, top_logprobs=5),
                dict(top_logprobs=20), {}]  # fmt: skip
    tokens = [[] for _ in batch]
    done = [threading.Event() for _ in batch]
    requests = [
        SlotRequest(prompt, 8, lambda t, i=i: tokens[i].append(t) or False,
                    lambda r, i=i: done[i].set(), **settings[i])  # fmt: skip
        for i, prompt in enumerate(batch)
    ]
    for request in requests:
        scheduler.submit(request)
    for event in done:
        assert event.wait(TIMEOUT)
    expected, distributions = [], []
    assert tokens[0] == greedy_reference(
        chat_model, batch[0], 8, presence=-1.0, frequency=-2.0, logprobs=expected,
        distributions=distributions,
    )  # fmt: skip
    assert tokens[0] != greedy_reference(chat_model, batch[0], 8)
    np.testing.assert_allclose(requests[0].logprobs, expected, atol=1e-4)
    assert len(requests[0].alternatives) == 8
    for pairs, distribution in zip(requests[0].alternatives, distributions,
                                   strict=True):  # fmt: skip
        assert_top_n(pairs, distribution, 5)
    distributions = []
    assert tokens[1] == greedy_reference(
        chat_model, batch[1], 8, distributions=distributions
    )
    for pairs, distribution, token in zip(requests[1].alternatives, distributions,
                                          tokens[1], strict=True):  # fmt: skip
        assert_top_n(pairs, distribution, 20)
        assert pairs[0][0] == token  # greedy: the most likely
    assert tokens[2] == greedy_reference(chat_model, batch[2], 8)
    assert requests[2].alternatives == []


def test_a_stop_and_a_cancel_free_the_slot(scheduler):
    tokens, reasons = [], []
    done = threading.Event()
    request = SlotRequest(
        [3, 4, 5], 40, lambda t: tokens.append(t) or len(tokens) == 2,
        lambda r: reasons.append(r) or done.set(),
    )  # fmt: skip
    scheduler.submit(request)
    assert done.wait(TIMEOUT)
    assert (len(tokens), reasons) == (2, ["stop"])
    cancelled = threading.Event()
    request = SlotRequest(
        [3, 4, 5], 40, lambda t: request.cancel() or False,
        lambda r: reasons.append(r) or cancelled.set(),
    )  # fmt: skip
    scheduler.submit(request)
    assert cancelled.wait(TIMEOUT)
    assert reasons[-1] == "cancelled" and request.generated < 40
    assert scheduler.busy() == 0


def test_a_prompt_past_the_slot_is_refused(scheduler):
    with pytest.raises(ValueError, match="does not fit a slot of 64"):
        scheduler.submit(SlotRequest([1] * 60, 9, None, None))


def test_warm_up_compiles_the_prefill_of_each_padded_prompt_length(chat_model):
    from keras_tfm.generation.continuous_batching.scheduler import Scheduler

    scheduler = Scheduler(chat_model, num_slots=2, max_length=64)
    prefill = scheduler.decoder._prefill  # a tf.function on TensorFlow
    scheduler.start(prompt_lengths=(1, 20, 40, 500))  # 32, 32, 64, 64 (the cap)
    try:
        assert prefill.experimental_get_tracing_count() == 2
        # A 45-token prompt (padded to 64) then runs a program compiled already.
        tokens, _ = run(scheduler, [[7] * 45], 3)
        assert len(tokens[0]) == 3
        assert prefill.experimental_get_tracing_count() == 2
    finally:
        scheduler.stop(timeout=TIMEOUT)

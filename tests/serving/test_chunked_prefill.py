"""Chunked prefill: a long prompt goes into its slot one chunk per call
boundary, with the answer of a full pass, while the other slots go on
decoding between its chunks."""

import threading

import numpy as np
import pytest

from keras_tfm.generation.continuous_batching import Scheduler, SlotRequest
from tests.serving.conftest import TIMEOUT, greedy_reference


def test_chunked_prompts_give_the_answers_of_full_passes(chat_model):
    rng = np.random.default_rng(5)
    vocabulary = chat_model.backbone.vocabulary_size
    long = list(rng.integers(3, vocabulary, 70))  # chunks of 32, 32 and 6
    short = list(rng.integers(3, vocabulary, 9))  # one chunk
    scheduler = Scheduler(
        chat_model, num_slots=2, max_length=96, prefix_cache_bytes=1 << 20,
        prefill_chunk=32,
    )  # fmt: skip
    scheduler.start()
    try:
        got = []
        for prompt in (long, short, long):  # the last: 64 tokens cached
            tokens, done = [], threading.Event()
            request = SlotRequest(
                prompt, 6, lambda t, tokens=tokens: tokens.append(t) or False,
                lambda reason, done=done: done.set(),
            )  # fmt: skip
            scheduler.submit(request)
            assert done.wait(TIMEOUT)
            got.append((tokens, request.logprobs, request.cached_tokens))
    finally:
        scheduler.stop(TIMEOUT)
    assert [cached for _, _, cached in got] == [0, 0, 64]
    for prompt, (tokens, logprobs, _) in zip((long, short, long), got, strict=True):
        reference = []
        assert tokens == greedy_reference(chat_model, prompt, 6, logprobs=reference)
        np.testing.assert_allclose(logprobs, reference, atol=1e-4)


@pytest.mark.parametrize("chunk, between", [(16, (4, 5)), (None, (0, 1))])
def test_other_slots_decode_between_a_long_prompts_chunks(chat_model, chunk, between):
    # `a` decodes; `b`, an 80-token prompt, arrives: in chunks of 16 its
    # prefill spans 5 call boundaries, and `a` gets a token between each
    # two (4, or 5 with the step that may run before `b` is admitted); all
    # at once, at most that one step.
    rng = np.random.default_rng(6)
    vocabulary = chat_model.backbone.vocabulary_size
    events, lock = [], threading.Lock()
    started, done = threading.Event(), threading.Event()

    def on_token(name):
        def call(token):
            with lock:
                events.append(name)
            started.set()
            return False

        return call

    scheduler = Scheduler(chat_model, num_slots=2, max_length=96, prefill_chunk=chunk)
    scheduler.start(prompt_lengths=(1, 80))
    try:
        a = SlotRequest(list(rng.integers(3, vocabulary, 5)), 24, on_token("a"),
                        lambda reason: None)  # fmt: skip
        scheduler.submit(a)
        assert started.wait(TIMEOUT)
        b = SlotRequest(list(rng.integers(3, vocabulary, 80)), 1, on_token("b"),
                        lambda reason: done.set())  # fmt: skip
        with lock:
            mark = len(events)
        scheduler.submit(b)
        assert done.wait(TIMEOUT)
    finally:
        scheduler.stop(TIMEOUT)
    with lock:
        after = events[mark:]
    count = after[: after.index("b")].count("a")
    assert between[0] <= count <= between[1], after


def test_a_chunk_must_be_a_multiple_of_16(chat_model):
    for chunk in (0, 24, 8.0, True):
        with pytest.raises(ValueError, match="prefill_chunk"):
            Scheduler(chat_model, num_slots=1, max_length=64, prefill_chunk=chunk)


def test_one_compiled_program_serves_every_slot(chat_model):
    # XLA compiles an `ops.slice` start as a constant: a program per slot,
    # seconds each for SmolLM2. The slot is a runtime input of these.
    from keras_tfm.generation.continuous_batching import SlotDecoder

    tf = pytest.importorskip("tensorflow")
    decoder = SlotDecoder(chat_model, 2, 64, prefix_cache_bytes=1 << 16)
    spare = np.full(4, decoder.prefix_cache.num_blocks, "int32")
    settings = (np.zeros(1, "float32"), np.ones(1, "float32"), np.zeros(1, "int32"),
                np.zeros(1, "float32"), np.zeros(1, "float32"))  # fmt: skip
    allowed = np.ones((1, chat_model.backbone.vocabulary_size), bool)
    tokens = np.zeros((1, 32), "int32")
    calls = {
        decoder._keep: lambda slot: (slot, spare),
        decoder._extend: lambda slot: (
            tokens, np.int32(40), np.int32(8), slot, settings, allowed
        ),
    }  # fmt: skip
    for function, arguments in calls.items():
        if not isinstance(function, tf.types.experimental.PolymorphicFunction):
            pytest.skip("the TensorFlow backend's compiled functions")
        hlo = [
            function.experimental_get_compiler_ir(*arguments(np.int32(slot)))("hlo")
            for slot in (0, 1)
        ]
        assert hlo[0] == hlo[1]


@pytest.mark.parametrize("text, chunk", [("0", None), ("256", 256), ("32", 32)])
def test_the_command_passes_its_chunk_on(text, chunk, monkeypatch):
    import argparse

    from keras_tfm.serving import command, server

    received = {}
    monkeypatch.setattr(server, "serve", lambda *a, **k: received.update(k))
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    command.run(parser.parse_args(["tiny", "--prefill-chunk", text]), model=None)
    assert received["prefill_chunk"] == chunk


@pytest.mark.parametrize("text", ["24", "-16", "x"])
def test_the_command_refuses_a_chunk_that_is_not_a_multiple_of_16(text, capsys):
    import argparse

    from keras_tfm.serving import command

    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    with pytest.raises(SystemExit):
        parser.parse_args(["tiny", "--prefill-chunk", text])
    assert "--prefill-chunk" in capsys.readouterr().err

"""Tiny served models and a server on a free loopback port."""

import threading

import numpy as np
import pytest

from keras_tfm.convert import GGUFBytePairTokenizer
from keras_tfm.serving import SlotRequest
from keras_tfm.serving.process import free_port
from keras_tfm.serving.server import ServerThread
from tests.builders import causal_lm
from tests.convert.tiny_gguf import MERGES, SPECIALS, TEMPLATE, tiny_vocabulary


@pytest.fixture(scope="package")
def chat_model():
    """A random 2-layer rotary LM behind the tiny ChatML byte-level tokenizer."""
    tokens = tiny_vocabulary()
    tokenizer = GGUFBytePairTokenizer(
        {t: i for i, t in enumerate(tokens)}, MERGES, unsplittable_tokens=SPECIALS,
        bos_token="<|im_start|>", eos_token="<|im_end|>", chat_template=TEMPLATE,
    )  # fmt: skip
    return causal_lm(
        vocabulary_size=len(tokens), num_layers=2, num_heads=2, hidden_dim=32,
        intermediate_dim=64, max_sequence_length=96, position_encoding="rotary",
        num_key_value_heads=1, padding_id=None, tokenizer=tokenizer,
    )  # fmt: skip


MODEL = "tiny-chat"
TIMEOUT = 60  # seconds, per wait: a bound, not an expectation
MAX_LENGTH = 64


@pytest.fixture(scope="package")
def server(chat_model):
    """One server for the package: 8 slots of 64 positions, a 4 KiB body limit."""
    with ServerThread(
        chat_model, MODEL, port=free_port(), max_batch=8, max_length=MAX_LENGTH,
        steps_per_call=2, max_body_bytes=4096,
    ) as server:  # fmt: skip
        yield server


def greedy_reference(
    model, ids, max_tokens, end_token_id=None, presence=0.0, frequency=0.0,
    logprobs=None, distributions=None,
):  # fmt: skip
    """Greedy new tokens by full uncached passes (no cache, no compiled loop).

    With OpenAI's penalties, in float64: logit[j] -= frequency * c[j] +
    presence * (c[j] > 0), c[j] the count of j among the new tokens. A list
    passed as `logprobs` receives each token's log-softmax of the raw logits,
    one passed as `distributions` each step's whole log-softmax (float64).
    """
    ids, new = list(ids), []
    counts = np.zeros(model.backbone.vocabulary_size)
    for _ in range(max_tokens):
        logits = np.asarray(model(np.array([ids])), "float64")[0, -1]
        penalized = logits - frequency * counts - presence * (counts > 0)
        token = int(np.argmax(penalized))
        top = logits.max()
        log_softmax = logits - top - np.log(np.exp(logits - top).sum())
        if logprobs is not None:
            logprobs.append(log_softmax[token])
        if distributions is not None:
            distributions.append(log_softmax)
        new.append(token)
        counts[token] += 1
        if token == end_token_id:
            break
        ids.append(token)
    return new


def run(scheduler, prompts, max_tokens, timeout=TIMEOUT, **settings):
    """Submits every prompt at once; the new tokens of each, and why it ended."""
    tokens = [[] for _ in prompts]
    reasons = [None] * len(prompts)
    done = [threading.Event() for _ in prompts]
    for i, prompt in enumerate(prompts):

        def finish(reason, i=i):
            reasons[i] = reason
            done[i].set()

        request = SlotRequest(
            prompt, max_tokens, lambda t, i=i: tokens[i].append(t) or False, finish,
            **settings,
        )  # fmt: skip
        scheduler.submit(request)
    for event in done:
        assert event.wait(timeout)
    return tokens, reasons


def assert_top_n(pairs, distribution, n):
    """`pairs` (token id, logprob) are the n most likely tokens of the
    float64 log-softmax `distribution`, most likely first (within 1e-4, so
    near-ties may come in either order)."""
    ids, values = [i for i, _ in pairs], [v for _, v in pairs]
    np.testing.assert_allclose(values, np.sort(distribution)[::-1][:n], atol=1e-4)
    np.testing.assert_allclose(values, distribution[ids], atol=1e-4)
    assert len(set(ids)) == n

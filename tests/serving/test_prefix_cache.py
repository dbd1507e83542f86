"""The prefix cache: prompts that start alike reuse their first blocks'
keys and values, with the answers of full passes, least recently used
blocks evicted first, and `cached_tokens` reported to the `openai` client."""

import threading

import httpx
import numpy as np
import openai
import pytest

from keras_tfm.generation.continuous_batching import Scheduler, SlotDecoder, SlotRequest
from keras_tfm.generation.continuous_batching.prefix_cache import PrefixCache
from keras_tfm.serving.process import free_port
from keras_tfm.serving.server import ServerThread
from tests.serving.conftest import MODEL, TIMEOUT, greedy_reference

BLOCK = 16  # SlotDecoder's default block size
# chat_model: 2 blocks of keys and values (1 head of 16) per token, float32.
BLOCK_BYTES = 2 * 2 * BLOCK * 1 * 16 * 4


# === The host index ===


def test_index_evicts_the_least_recently_used_block_chains_last_first():
    cache = PrefixCache(num_blocks=3, block_size=2)
    a, b, c = [1, 2, 3, 4, 5], [7, 8, 9], [5, 6, 0]
    assert cache.store(a, 0) == [(0, 0), (1, 1)]  # (block of the prompt, pool block)
    assert cache.store(b, 0) == [(0, 2)]
    assert cache.match(a) == [0, 1]  # a is now more recent than b
    assert cache.store(c, len(cache.match(c))) == [(0, 2)]  # b's block went
    assert cache.match(b) == []
    # a's second block goes before its first (a chain ages from its end).
    assert cache.store(b, 0) == [(0, 1)]
    assert cache.match(a) == [0]
    assert len(cache) == 3


def test_index_names_a_block_by_every_token_before_it():
    cache = PrefixCache(num_blocks=8, block_size=2)
    cache.store([1, 2, 3, 4, 0], 0)
    assert cache.match([9, 2, 3, 4, 0]) == []  # the same second block, another first
    assert cache.match([1, 2, 3, 4]) == [0]  # the last token is left to prefill
    assert cache.match([1, 2, 3, 4, 5]) == [0, 1]
    assert cache.match([1, 2, 3, 5, 5]) == [0]  # diverges inside the second block
    small = PrefixCache(num_blocks=2, block_size=2)
    assert small.store([1] * 9, 0) == [(0, 0), (1, 1)]  # at most the pool's blocks
    small.discard([1] * 9, [(1, 1)])
    assert small.match([1] * 9) == [0] and len(small) == 1
    with pytest.raises(ValueError, match="matched=2"):
        small.store([3] * 9, 2)


# === The slot decoder: the pool's bound, its eviction, its answers ===


def test_the_pool_is_bounded_in_bytes(chat_model):
    decoder = SlotDecoder(chat_model, 1, 64, prefix_cache_bytes=3 * BLOCK_BYTES + 100)
    assert decoder.prefix_cache.num_blocks == 3
    assert sum(int(np.prod(p.shape)) * 4 for p in decoder.pools) == 4 * BLOCK_BYTES
    # Past what the slots can use: four times their positions (4 blocks).
    large = SlotDecoder(chat_model, 1, 64, prefix_cache_bytes=1 << 30)
    assert large.prefix_cache.num_blocks == 16
    assert SlotDecoder(chat_model, 1, 64).prefix_cache is None
    one_block = f"one block of 16 tokens \\({BLOCK_BYTES} bytes"
    with pytest.raises(ValueError, match=one_block):
        SlotDecoder(chat_model, 1, 64, prefix_cache_bytes=BLOCK_BYTES - 1)
    with pytest.raises(ValueError, match="prefix_cache_bytes=-1"):
        SlotDecoder(chat_model, 1, 64, prefix_cache_bytes=-1)


def first_token(model, prompt):
    return greedy_reference(model, prompt, 1)[0]


def test_decoder_evicts_least_recently_used_blocks_and_answers_as_full_passes(
    chat_model,
):
    rng = np.random.default_rng(3)
    vocabulary = chat_model.backbone.vocabulary_size
    a, b, c = (list(rng.integers(3, vocabulary, n)) for n in (33, 17, 17))
    decoder = SlotDecoder(chat_model, 1, 64, prefix_cache_bytes=3 * BLOCK_BYTES)
    # a fills 2 blocks, b 1: the pool is full; a again refreshes its blocks,
    # so c evicts b's; b then evicts a's last block, not its first.
    expected = [(a, 0), (b, 0), (a, 32), (c, 0), (b, 0), (a, 16)]
    for prompt, cached in expected:
        first, _, _, got = decoder.prefill(0, prompt)
        assert got == cached
        assert first == first_token(chat_model, prompt)


def answers(scheduler, prompts, max_tokens):
    """Each prompt alone in turn: its tokens, logprobs and cached tokens."""
    out = []
    for prompt in prompts:
        tokens, done = [], threading.Event()
        request = SlotRequest(
            prompt, max_tokens, lambda t, tokens=tokens: tokens.append(t) or False,
            lambda reason, done=done: done.set(),
        )  # fmt: skip
        scheduler.submit(request)
        assert done.wait(TIMEOUT)
        out.append((tokens, request.logprobs, request.cached_tokens))
    return out


def test_cached_prefixes_give_the_answers_of_full_passes(chat_model):
    rng = np.random.default_rng(7)
    vocabulary = chat_model.backbone.vocabulary_size
    shared = list(rng.integers(3, vocabulary, 40))  # 2 whole blocks and 8
    prompts = [
        shared + list(rng.integers(3, vocabulary, 5)),
        shared + list(rng.integers(3, vocabulary, 9)),  # after 2 blocks
        shared[:24] + list(rng.integers(3, vocabulary, 6)),  # inside the 2nd
        shared[:5] + [int(shared[5]) % (vocabulary - 3) + 3] + shared[6:],  # 1st
    ]
    scheduler = Scheduler(
        chat_model, num_slots=2, max_length=96, prefix_cache_bytes=1 << 20
    )
    decoder = scheduler.decoder  # its prefills: tf.functions on TensorFlow
    scheduler.start(prompt_lengths=(1, 40))  # padded to 32 and 64
    try:
        got = answers(scheduler, prompts + prompts[:1], max_tokens=6)
        if hasattr(decoder._prefill, "experimental_get_tracing_count"):
            # The warm-up compiled both prefills of both lengths (the
            # prompts after cached blocks are padded to 32 tokens).
            assert decoder._prefill.experimental_get_tracing_count() == 2
            assert decoder._prefill_after.experimental_get_tracing_count() == 2
    finally:
        scheduler.stop(TIMEOUT)
    assert [cached for _, _, cached in got] == [0, 32, 16, 0, 32]
    for prompt, (tokens, logprobs, _) in zip(prompts + prompts[:1], got, strict=True):
        reference = []
        assert tokens == greedy_reference(chat_model, prompt, 6, logprobs=reference)
        np.testing.assert_allclose(logprobs, reference, atol=1e-4)


def test_the_next_turn_reuses_the_blocks_of_the_answer_before_it(chat_model):
    rng = np.random.default_rng(11)
    vocabulary = chat_model.backbone.vocabulary_size
    first = list(rng.integers(3, vocabulary, 20))  # one whole block and 4
    scheduler = Scheduler(
        chat_model, num_slots=1, max_length=96, prefix_cache_bytes=1 << 20
    )
    scheduler.start(prompt_lengths=(1, 40))
    try:
        [(answer, _, cached)] = answers(scheduler, [first], max_tokens=20)
        # The prompt, the answer (39 tokens in the slot: its last one was
        # not fed) and 5 more: 2 whole blocks cached, the prompt alone 1.
        turn = first + answer + list(rng.integers(3, vocabulary, 5))
        [(tokens, logprobs, next_cached)] = answers(scheduler, [turn], 6)
        held = len(scheduler.decoder.prefix_cache)
    finally:
        scheduler.stop(TIMEOUT)
    assert (cached, next_cached) == (0, 32)
    # The first prompt's block, the answer's, and the second turn's: its
    # 51 tokens less the last hold 3 whole blocks, 2 of them held already.
    assert held == 3
    reference = []
    assert tokens == greedy_reference(chat_model, turn, 6, logprobs=reference)
    np.testing.assert_allclose(logprobs, reference, atol=1e-4)


def test_a_prompt_stored_again_claims_no_second_block():
    cache = PrefixCache(num_blocks=4, block_size=2)
    prompt = [1, 2, 3, 4]  # two whole blocks; `match` leaves the last out
    assert cache.store(prompt, 0) == [(0, 0), (1, 1)]
    for _ in range(5):
        assert cache.store(prompt, len(cache.match(prompt))) == []
    assert len(cache) == 2
    assert cache.store([5, 6, 7, 8], 0) == [(0, 2), (1, 3)]  # two blocks free
    # The pool is full: [7, 8]'s block goes (a chain ages from its end).
    assert cache.store([1, 2, 3, 4, 9, 9], 0) == [(2, 3)]


# === Over HTTP, with the openai client ===

SYSTEM = "Be brief and kind."  # no other test of the package sends it


@pytest.fixture(scope="module")
def clients(server, chat_model):
    """`openai` clients of the package's server (the default prefix cache)
    and of one without a prefix cache."""
    plain = ServerThread(
        chat_model, MODEL, port=free_port(), max_batch=1, max_length=64,
        prefix_cache_mb=0,
    )  # fmt: skip
    with plain:
        made = [
            openai.OpenAI(
                base_url=url + "/v1", api_key="unused", max_retries=0,
                timeout=TIMEOUT,
            )
            for url in (server.url, plain.url)
        ]  # fmt: skip
        yield made
        for client in made:
            client.close()


def ask(client, question, **kwargs):
    messages = [{"role": "system", "content": SYSTEM},
                {"role": "user", "content": question}]  # fmt: skip
    return client.chat.completions.create(
        model=MODEL, messages=messages, max_tokens=8, temperature=0, **kwargs
    )


def prompt_of(model, question):
    tokenizer = model.tokenizer
    messages = [{"role": "system", "content": SYSTEM},
                {"role": "user", "content": question}]  # fmt: skip
    return [int(i) for i in tokenizer(tokenizer.apply_chat_template(messages))]


def cached_total(server):
    """`keras_tfm_cached_prompt_tokens_total` of `server`'s /metrics."""
    with httpx.Client(timeout=TIMEOUT) as http:
        lines = http.get(server.url + "/metrics").text.splitlines()
    name = "keras_tfm_cached_prompt_tokens_total "
    return next(float(line[len(name) :]) for line in lines if line.startswith(name))


@pytest.mark.slow  # two servers through the openai client
def test_second_chat_reports_its_cached_system_prompt(server, clients, chat_model):
    cached, plain = clients
    questions = ["hi there", "good day"]
    first, second = (prompt_of(chat_model, q) for q in questions)
    common = next(
        i for i, (x, y) in enumerate(zip(first, second, strict=False)) if x != y
    )
    # Whole blocks of the common prefix, the second prompt's last token aside.
    expected = min(common, len(second) - 1) // BLOCK * BLOCK
    assert expected >= 32
    counted = cached_total(server)
    replies = [ask(cached, q) for q in questions]
    assert [r.usage.prompt_tokens_details.cached_tokens for r in replies] == [
        0, expected,
    ]  # fmt: skip
    # The same answers without a cache, which reports none.
    for question, reply in zip(questions, replies, strict=True):
        alone = ask(plain, question)
        assert alone.choices[0].message.content == reply.choices[0].message.content
        assert alone.usage.prompt_tokens_details.cached_tokens == 0
    tokenizer = chat_model.tokenizer
    answer = greedy_reference(chat_model, second, 8, tokenizer.end_token_id)
    answer = answer[:-1] if answer[-1] == tokenizer.end_token_id else answer
    assert replies[1].choices[0].message.content == tokenizer.detokenize(answer)

    # Streamed, the usage chunk says it too: now the whole second prompt's
    # blocks are cached.
    chunks = list(ask(cached, questions[1], stream=True,
                      stream_options={"include_usage": True}))  # fmt: skip
    streamed = chunks[-1].usage.prompt_tokens_details.cached_tokens
    assert streamed == (len(second) - 1) // BLOCK * BLOCK
    assert cached_total(server) - counted == expected + streamed


@pytest.mark.slow  # two servers through the openai client
def test_completions_report_cached_tokens(clients):
    prompt = list(range(40, 80))  # token ids: 2 whole blocks and 8
    reply = clients[0].completions.create(
        model=MODEL, prompt=[prompt, prompt], max_tokens=2, temperature=0
    )
    # The first of the two is prefilled first (one per slot, in order).
    assert reply.usage.prompt_tokens_details.cached_tokens == 32

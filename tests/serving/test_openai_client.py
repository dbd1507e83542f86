"""The real `openai` client against `keras-tfm serve`'s app on 127.0.0.1.

Each server runs in a thread of the test process (uvicorn on a free port)
and is stopped by its fixture; every call has a timeout and no retries.
"""

import concurrent.futures
import threading

import httpx
import numpy as np
import openai
import pytest

from keras_tfm.convert import HFBertTokenizer
from keras_tfm.generation.stop_strings import token_bytes
from keras_tfm.models import (
    EncoderBackbone,
    SentenceEncoder,
    TextClassifierPreprocessor,
)
from keras_tfm.serving.app import Service
from keras_tfm.serving.process import free_port
from keras_tfm.serving.server import ServerThread
from tests.builders import seq2seq_lm
from tests.serving.conftest import MODEL, assert_top_n, greedy_reference

TIMEOUT = 60


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(
        base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=TIMEOUT
    )


def expected_answer(model, messages, max_tokens):
    """The greedy answer's text by full passes, the prompt length, whether it ended."""
    tokenizer = model.tokenizer
    prompt = [int(i) for i in tokenizer(tokenizer.apply_chat_template(messages))]
    end = tokenizer.end_token_id
    answer = greedy_reference(model, prompt, max_tokens, end)
    ended = answer[-1] == end
    return tokenizer.detokenize(answer[:-1] if ended else answer), len(prompt), ended


def chat(client, content, **kwargs):
    kwargs = dict(dict(max_tokens=8, temperature=0), **kwargs)
    messages = [{"role": "user", "content": content}]
    return client.chat.completions.create(model=MODEL, messages=messages, **kwargs)


def test_models_and_health(client, server):
    assert [m.id for m in client.models.list()] == [MODEL]
    health = httpx.get(server.url + "/health", timeout=TIMEOUT).json()
    assert health["status"] == "ok" and health["busy"] == 0


def test_chat_answer_usage_and_stream_agree_with_generate(client, chat_model):
    messages = [{"role": "user", "content": "hello world"}]
    text, prompt_tokens, ended = expected_answer(chat_model, messages, 8)
    reply = chat(client, "hello world")
    assert reply.choices[0].message.content == text
    assert reply.choices[0].finish_reason == ("stop" if ended else "length")
    assert reply.usage.prompt_tokens == prompt_tokens
    assert reply.usage.total_tokens == prompt_tokens + reply.usage.completion_tokens
    chunks = list(chat(client, "hello world", stream=True,
                       stream_options={"include_usage": True}))  # fmt: skip
    pieces = [c.choices[0].delta.content or "" for c in chunks if c.choices]
    assert "".join(pieces) == text
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == (
        reply.choices[0].finish_reason
    )
    assert chunks[-1].usage.completion_tokens == reply.usage.completion_tokens


def test_chat_logprobs_and_penalties_follow_full_passes(client, chat_model):
    tokenizer = chat_model.tokenizer
    messages = [{"role": "user", "content": "hello world"}]
    prompt = [int(i) for i in tokenizer(tokenizer.apply_chat_template(messages))]
    expected, distributions = [], []
    tokens = greedy_reference(
        chat_model, prompt, 8, tokenizer.end_token_id, presence=0.5,
        frequency=2.0, logprobs=expected, distributions=distributions,
    )  # fmt: skip
    penalties = dict(presence_penalty=0.5, frequency_penalty=2.0, logprobs=True,
                     top_logprobs=4)  # fmt: skip
    reply = chat(client, "hello world", **penalties).choices[0]
    assert reply.message.content == tokenizer.detokenize(
        [t for t in tokens if t != tokenizer.end_token_id]
    )
    content = reply.logprobs.content
    assert len(content) == len(tokens) - (tokens[-1] == tokenizer.end_token_id)
    np.testing.assert_allclose([c.logprob for c in content], expected[: len(content)],
                               atol=1e-4)  # fmt: skip
    answer = b"".join(bytes(c.bytes) for c in content)  # random bytes: not all UTF-8
    assert answer.decode(errors="replace") == reply.message.content
    # Each step's 4 most likely tokens under the raw logits, by their bytes.
    ids = {piece: i for i, piece in enumerate(
        token_bytes(tokenizer, chat_model.backbone.vocabulary_size))}  # fmt: skip
    for entry, distribution in zip(content, distributions, strict=False):
        pairs = [(ids[bytes(t.bytes)], t.logprob) for t in entry.top_logprobs]
        assert_top_n(pairs, distribution, 4)
    # Streamed, the same scores arrive chunk by chunk.
    chunks = chat(client, "hello world", stream=True, **penalties)
    streamed = [e for c in chunks if c.choices and c.choices[0].logprobs
                for e in c.choices[0].logprobs.content]  # fmt: skip
    assert [e.model_dump() for e in streamed] == [e.model_dump() for e in content]


def test_completion_and_stop_string(client, chat_model):
    ids = [int(i) for i in chat_model.preprocessor.generate_preprocess(["hell"])[0]]
    full = chat_model.tokenizer.detokenize(greedy_reference(chat_model, ids, 6))
    reply = client.completions.create(
        model=MODEL, prompt="hell", max_tokens=6, temperature=0
    )
    assert reply.choices[0].text == full and reply.choices[0].finish_reason == "length"
    # logprobs=0: the chosen tokens' log-probabilities, in the older layout.
    scored = client.completions.create(
        model=MODEL, prompt="hell", max_tokens=6, temperature=0, logprobs=0
    ).choices[0].logprobs
    expected = []
    greedy_reference(chat_model, ids, 6, logprobs=expected)
    np.testing.assert_allclose(scored.token_logprobs, expected, atol=1e-4)
    lengths = [len(t) for t in scored.tokens]
    assert scored.text_offset == [sum(lengths[:i]) for i in range(6)]
    assert scored.top_logprobs is None
    # logprobs=3: each token's 3 most likely, as {text: logprob}.
    request = dict(model=MODEL, prompt="hell", max_tokens=6, temperature=0,
                   logprobs=3)  # fmt: skip
    top = client.completions.create(**request).choices[0].logprobs.top_logprobs
    distributions = []
    greedy_reference(chat_model, ids, 6, distributions=distributions)
    for alternatives, distribution in zip(top, distributions, strict=True):
        best = np.sort(distribution)[::-1][:3]
        values = list(alternatives.values())  # two tokens of one text share a key
        assert 1 <= len(values) <= 3 and values == sorted(values, reverse=True)
        assert np.abs(np.subtract.outer(values, best)).min(axis=1).max() < 1e-4
        assert abs(values[0] - best[0]) < 1e-4
    streamed = [c.choices[0].logprobs.top_logprobs
                for c in client.completions.create(**request, stream=True)
                if c.choices[0].logprobs]  # fmt: skip
    assert sum(streamed, []) == top
    with pytest.raises(openai.BadRequestError, match="from 0 to 5. Received: lo"):
        client.completions.create(model=MODEL, prompt="hell", logprobs=6)
    # A stop string cuts the answer before it, and is not returned.
    stop = full[2:4]
    cut = client.completions.create(
        model=MODEL, prompt="hell", max_tokens=6, temperature=0, stop=[stop]
    )
    assert cut.choices[0].text == full[: full.index(stop)]
    assert cut.choices[0].finish_reason == "stop"


def test_eight_concurrent_clients_get_their_sequential_answers(client):
    contents = ["hello", "world", "or", "hell", "he wor", "ll", "owl", "rho"]
    alone = [chat(client, c).choices[0].message.content for c in contents]
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        together = list(pool.map(lambda c: chat(client, c).choices[0].message.content,
                                 contents))  # fmt: skip
    assert together == alone
    # Seeded sampling too: the answer depends on the seed, not on the batch.
    sampled = dict(temperature=1.0, seed=5, max_tokens=8)
    alone = chat(client, "hello", **sampled).choices[0].message.content
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        together = list(pool.map(
            lambda c: chat(client, c, **sampled).choices[0].message.content,
            ["hello", "world", "or", "owl"]))  # fmt: skip
    assert together[0] == alone


@pytest.mark.parametrize(
    "kwargs, status, words",
    [
        (dict(model="gpt-4"), 404, "does not exist"),
        (dict(temperature="hot"), 400, "`temperature` must be a number"),
        (dict(max_tokens=-3), 400,
         "`max_tokens` must be an integer of at least 1. Received: max_tokens=-3"),
        (dict(max_tokens=10**9), 400, "at most"),
        (dict(messages="hi"), 400, "`messages` must be a non-empty list"),
        (dict(extra_body={"logit_bias": {}, "tools": []}), 400,
         "logit_bias, tools"),
        (dict(n=2), 400, "`n` must be 1: this server returns one answer"),
        (dict(logprobs=True, top_logprobs=21), 400,
         "`top_logprobs` must be an integer from 0 to 20. Received: top_logprobs=21"),
        (dict(logprobs=True, top_logprobs=-1), 400, "from 0 to 20"),
        (dict(top_logprobs=3), 400, "used with logprobs=true"),
        (dict(presence_penalty=2.5), 400, "`presence_penalty` must be a number"),
        (dict(messages=[{"role": "user", "content": "hello " * 30}]), 400,
         "no room for an answer"),
        (dict(messages=[{"role": "user", "content": "x" * 5000}]), 413, "4096 bytes"),
    ],
)  # fmt: skip
def test_bad_requests_get_openai_errors(client, kwargs, status, words):
    request = dict(model=MODEL, messages=[{"role": "user", "content": "hi"}],
                   max_tokens=4)  # fmt: skip
    request.update(kwargs)
    with pytest.raises(openai.APIStatusError) as caught:
        client.chat.completions.create(**request)
    assert caught.value.status_code == status
    assert words in caught.value.body["message"]
    assert caught.value.body["type"] == "invalid_request_error"


def test_malformed_json_and_unknown_routes(server):
    reply = httpx.post(
        server.url + "/v1/chat/completions", content=b"{not json", timeout=TIMEOUT
    )
    assert reply.status_code == 400
    assert "not valid JSON" in reply.json()["error"]["message"]
    reply = httpx.get(server.url + "/v1/nothing", timeout=TIMEOUT)
    assert reply.status_code == 404 and reply.json()["error"]["message"]


def test_a_client_that_disconnects_mid_stream_frees_its_slot(server):
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 40, "temperature": 1.0, "stream": True}  # fmt: skip
    with httpx.stream("POST", server.url + "/v1/chat/completions", json=body,
                      timeout=TIMEOUT) as reply:  # fmt: skip
        lines = reply.iter_lines()
        assert next(lines).startswith("data: ")
    busy = threading.Event()
    for _ in range(200):  # at most ~10 s
        if httpx.get(server.url + "/health", timeout=TIMEOUT).json()["busy"] == 0:
            busy.set()
            break
        busy.wait(0.05)
    assert busy.is_set()


def test_a_seq2seq_model_is_refused_by_name():
    translator = seq2seq_lm(
        vocabulary_size=8, num_encoder_layers=1, num_decoder_layers=1,
        num_heads=1, hidden_dim=4,
        intermediate_dim=8, max_sequence_length=8,
    )  # fmt: skip
    with pytest.raises(ValueError, match="does not serve sequence-to-sequence"):
        Service(translator, "translator")


@pytest.fixture(scope="module")
def encoder():
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "cat", "dog", "sat"]
    backbone = EncoderBackbone(
        vocabulary_size=len(words), num_layers=1, num_heads=2, hidden_dim=8,
        intermediate_dim=16, max_sequence_length=16,
    )  # fmt: skip
    tokenizer = HFBertTokenizer(words, lowercase=True)
    return SentenceEncoder(backbone, TextClassifierPreprocessor(tokenizer, 16))


def test_embeddings_equal_encode(encoder):
    texts = ["a cat sat", "dog"]
    expected = encoder.encode(texts)
    with ServerThread(encoder, "tiny-encoder", port=free_port()) as server:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused",
                               max_retries=0, timeout=TIMEOUT)  # fmt: skip
        # Left to itself, the client asks for base64 and decodes it.
        for encoding in ({}, {"encoding_format": "float"}):
            reply = client.embeddings.create(
                model="tiny-encoder", input=texts, **encoding
            )
            got = np.array([d.embedding for d in reply.data])
            np.testing.assert_allclose(got, expected, atol=1e-6)
        assert reply.usage.prompt_tokens == 3 + 1 + 2 * 2  # words, [CLS], [SEP]
        with pytest.raises(openai.BadRequestError, match="needs a causal LM"):
            client.completions.create(model="tiny-encoder", prompt="a")
        health = httpx.get(server.url + "/health", timeout=TIMEOUT).json()
        assert health == {"status": "ok", "model": "tiny-encoder", "busy": 0}

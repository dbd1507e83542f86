"""`echo` with `logprobs` on /v1/completions, as lm-evaluation-harness's
`local-completions` model scores multiple choice: the prompt's tokens'
log-probabilities against float64 full passes and `CausalLM.score`."""

import httpx
import numpy as np
import openai
import pytest

from keras_tfm.serving.process import free_port
from keras_tfm.serving.server import ServerThread
from tests.builders import causal_lm
from tests.serving.conftest import MAX_LENGTH, MODEL, TIMEOUT, greedy_reference


@pytest.fixture(scope="module")
def client(server):
    with openai.OpenAI(base_url=server.url + "/v1", api_key="unused",
                       max_retries=0, timeout=TIMEOUT) as client:  # fmt: skip
        yield client


def ids_of(model, text):
    return [int(i) for i in model.preprocessor.generate_preprocess([text])[0]]


def reference_log_softmax(model, ids):
    """(len(ids) - 1, V) float64 log-softmax of one full pass: row t - 1
    predicts ids[t]."""
    logits = np.asarray(model(np.array([ids])), "float64")[0, :-1]
    top = logits.max(axis=-1, keepdims=True)
    return logits - top - np.log(np.exp(logits - top).sum(axis=-1, keepdims=True))


def test_echoed_prompt_logprobs_are_the_models(client, chat_model):
    text = "hello world, or owl"
    ids = ids_of(chat_model, text)
    reply = client.completions.create(
        model=MODEL, prompt=text, echo=True, logprobs=3, max_tokens=0
    )
    choice = reply.choices[0]
    assert choice.text == text and choice.finish_reason == "length"
    assert reply.usage.prompt_tokens == len(ids)
    assert reply.usage.completion_tokens == 0
    scored = choice.logprobs
    assert scored.token_logprobs[0] is None and scored.top_logprobs[0] is None
    reference = reference_log_softmax(chat_model, ids)
    expected = reference[np.arange(len(ids) - 1), ids[1:]]
    np.testing.assert_allclose(scored.token_logprobs[1:], expected, atol=1e-4)
    # The sum is CausalLM.score's log-likelihood of the text.
    log_likelihood, count = chat_model.score([text])
    assert count[0] == len(ids) - 1
    np.testing.assert_allclose(sum(scored.token_logprobs[1:]), log_likelihood[0],
                               rtol=1e-5, atol=1e-4)  # fmt: skip
    # The tokens spell the prompt; offsets count their characters.
    assert "".join(scored.tokens) == text
    lengths = [len(t) for t in scored.tokens]
    assert scored.text_offset == [sum(lengths[:i]) for i in range(len(ids))]
    # Each position's 3 most likely, as {text: logprob}.
    for alternatives, row in zip(scored.top_logprobs[1:], reference, strict=True):
        values = list(alternatives.values())
        assert values == sorted(values, reverse=True)
        assert abs(values[0] - row.max()) < 1e-4


def test_echo_then_the_answer(client, chat_model):
    text = "hell"
    ids = ids_of(chat_model, text)
    expected = []
    answer = greedy_reference(chat_model, ids, 5, logprobs=expected)
    reply = client.completions.create(
        model=MODEL, prompt=text, echo=True, logprobs=0, max_tokens=5, temperature=0
    )
    choice = reply.choices[0]
    assert choice.text == text + chat_model.tokenizer.detokenize(answer)
    assert reply.usage.completion_tokens == 5
    scored = choice.logprobs
    assert len(scored.token_logprobs) == len(ids) + 5
    assert scored.top_logprobs is None  # logprobs=0: no alternatives
    np.testing.assert_allclose(scored.token_logprobs[len(ids) :], expected, atol=1e-4)
    lengths = [len(t) for t in scored.tokens]
    assert scored.text_offset == [sum(lengths[:i]) for i in range(len(lengths))]
    # Streamed: the prompt first, then the answer, with the same scores.
    chunks = list(client.completions.create(
        model=MODEL, prompt=text, echo=True, logprobs=0, max_tokens=5,
        temperature=0, stream=True,
    ))  # fmt: skip
    assert chunks[0].choices[0].text == text
    assert "".join(c.choices[0].text for c in chunks) == choice.text
    streamed = [lp for c in chunks if c.choices[0].logprobs
                for lp in c.choices[0].logprobs.token_logprobs]  # fmt: skip
    assert streamed == scored.token_logprobs
    # Without echo the text is the answer alone.
    plain = client.completions.create(
        model=MODEL, prompt=text, max_tokens=5, temperature=0
    )
    assert plain.choices[0].text == chat_model.tokenizer.detokenize(answer)


def test_multiple_choice_as_lm_eval_asks(client, chat_model):
    """lm-eval's request: token ids of context + continuation, echo,
    max_tokens 1, logprobs 1; it sums token_logprobs[ctxlen:-1] and calls
    a choice greedy when each of its tokens equals its step's best."""
    context = ids_of(chat_model, "he wor")
    choices = [ids_of(chat_model, c) for c in ("ld", "ll", " owl", "rho or")]
    greedy = greedy_reference(chat_model, context, 2)
    choices.append(greedy)
    reply = client.completions.create(
        model=MODEL, prompt=[context + c for c in choices], echo=True,
        max_tokens=1, logprobs=1, temperature=0, seed=1234,
    )  # fmt: skip
    assert [c.index for c in reply.choices] == list(range(len(choices)))
    served, greedy_flags = [], []
    for choice in reply.choices:
        logprobs = choice.logprobs.token_logprobs[len(context) : -1]
        tops = choice.logprobs.top_logprobs[len(context) : -1]
        served.append(sum(logprobs))
        greedy_flags.append(all(lp == max(t.values()) for lp, t in zip(
            logprobs, tops, strict=True)))  # fmt: skip
    # CausalLM.score of context + choice, less that of the context alone.
    whole, _ = chat_model.score([context + c for c in choices])
    alone, _ = chat_model.score([context])
    expected = whole - alone[0]
    np.testing.assert_allclose(served, expected, rtol=1e-5, atol=1e-4)
    assert np.argsort(served).tolist() == np.argsort(expected).tolist()
    assert greedy_flags[-1]  # the greedy answer's tokens are their steps' best
    assert reply.usage.prompt_tokens == sum(len(context + c) for c in choices)
    assert reply.usage.completion_tokens == len(choices)


def test_an_answer_that_ends_at_once_keeps_one_entry_per_token(chat_model):
    """Echoed, the end token has its entry too: lm-eval cuts the last entry
    off as the generated token's, so without it a prompt token would go.
    The model is made to end at once: an untied head whose only non-zero
    column, the end token's, is the prompt's last hidden state."""
    tokenizer = chat_model.tokenizer
    end = tokenizer.end_token_id
    model = causal_lm(
        vocabulary_size=chat_model.backbone.vocabulary_size, num_layers=1,
        num_heads=2, hidden_dim=32, intermediate_dim=64, max_sequence_length=96,
        position_encoding="rotary", padding_id=None, tokenizer=tokenizer,
        tie_word_embeddings=False,
    )  # fmt: skip
    ids = ids_of(model, "hello world")
    hidden = np.asarray(model.backbone(np.array([ids])))[0, -1]
    kernel = np.zeros(model.lm_head.kernel.shape, "float32")
    kernel[:, end] = 10 * hidden / np.linalg.norm(hidden)
    model.lm_head.kernel.assign(kernel)
    with ServerThread(model, MODEL, port=free_port(), max_batch=1,
                      max_length=MAX_LENGTH) as server, openai.OpenAI(
        base_url=server.url + "/v1", api_key="unused", max_retries=0,
        timeout=TIMEOUT,
    ) as client:  # fmt: skip
        request = dict(model=MODEL, prompt=ids, echo=True, max_tokens=1,
                       logprobs=1, temperature=0)  # fmt: skip
        reply = client.completions.create(**request)
        chunks = list(client.completions.create(**request, stream=True))
    choice = reply.choices[0]
    assert reply.usage.completion_tokens == 1 and choice.finish_reason == "stop"
    scored = choice.logprobs.token_logprobs
    assert len(scored) == len(ids) + 1 == reply.usage.total_tokens
    reference = reference_log_softmax(model, ids + [end])
    expected = reference[np.arange(len(ids)), ids[1:] + [end]]
    np.testing.assert_allclose(scored[1:], expected, atol=1e-4)
    assert scored[-1] == max(choice.logprobs.top_logprobs[-1].values())
    streamed = [lp for c in chunks if c.choices[0].logprobs
                for lp in c.choices[0].logprobs.token_logprobs]  # fmt: skip
    assert streamed == scored


@pytest.mark.parametrize(
    "body, words",
    [
        (dict(prompt="hell", max_tokens=0), "`max_tokens` must be an integer"),
        (dict(prompt="hell", echo="yes"), "`echo` must be true or false"),
        (dict(prompt="hell", echo=True, max_tokens=0, stream=True),
         "`stream` must be false with several prompts or max_tokens=0"),
        (dict(prompt=["hell", "owl"], stream=True), "`stream` must be false"),
        (dict(prompt=[[1, 2], [3, 10**6]]), "outside the vocabulary"),
        (dict(prompt=[[1, 2], [-1]]), "outside the vocabulary"),
        (dict(prompt=[[1, 2], []]), "`prompt` must be a non-empty string, a list"),
        (dict(prompt=[1, "a"]), "`prompt` must be"),
        (dict(prompt=[True, 2]), "`prompt` must be"),
        (dict(prompt=["a"] * 65), "at most 64 prompts"),
        (dict(prompt=[1] * 70, echo=True, max_tokens=0), "too long to score"),
    ],
)  # fmt: skip
def test_bad_echo_requests_are_named(server, body, words):
    reply = httpx.post(server.url + "/v1/completions", timeout=TIMEOUT,
                       json=dict(model=MODEL, **body))  # fmt: skip
    assert reply.status_code == 400
    assert words in reply.json()["error"]["message"]


def test_tokenizer_routes_are_the_models_tokenizer(server, chat_model):
    """vLLM's /tokenize, /detokenize and /tokenizer_info, which lm-eval's
    "remote" tokenizer backend reads."""
    text = "hello world, or owl"
    reply = httpx.post(
        server.url + "/tokenize",
        timeout=TIMEOUT,
        json={"prompt": text, "add_special_tokens": False},
    ).json()
    assert reply["tokens"] == ids_of(chat_model, text)
    assert reply["count"] == len(reply["tokens"])
    back = httpx.post(server.url + "/detokenize", timeout=TIMEOUT,
                      json={"tokens": reply["tokens"]}).json()  # fmt: skip
    assert back == {"prompt": text}
    info = httpx.get(server.url + "/tokenizer_info", timeout=TIMEOUT).json()
    assert info["eos_token"] == "<|im_end|>"
    # lm-eval takes the end token's id as the first id of its text.
    end = httpx.post(server.url + "/tokenize", timeout=TIMEOUT,
                     json={"prompt": info["eos_token"]}).json()["tokens"]  # fmt: skip
    assert end == [chat_model.tokenizer.end_token_id]
    for route, body, words in [
        ("/tokenize", {"prompt": 3}, "`prompt` must be a string"),
        ("/tokenize", {"prompt": "a", "extra": 1}, "Unsupported field(s): extra"),
        ("/detokenize", {"tokens": [1, 10**6]}, "`tokens` must be a list"),
        ("/detokenize", {"tokens": "abc"}, "`tokens` must be a list"),
        ("/tokenize", {"prompt": "a", "model": "gpt-4"}, "does not exist"),
        ("/tokenize", {"prompt": "a", "model": 5}, "`model` must be a string"),
        ("/tokenize", ["a"], "must be a JSON object. Received: list"),
    ]:
        refused = httpx.post(server.url + route, json=body, timeout=TIMEOUT)
        assert refused.status_code in (400, 404)
        assert words in refused.json()["error"]["message"]

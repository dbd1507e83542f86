"""`response_format` through the real `openai` client: every answer of the
random tiny chat model parses and validates; greedy answers equal
`generate(response_format=...)` on the same prompt, in the continuous batch
(one step per call: the automaton moves between calls) and beside it (the
package's server decodes two steps per call); bad formats are 400s that
name the problem."""

import asyncio
import json

import jsonschema
import openai
import pytest

from keras_tfm.generation import grammar
from keras_tfm.serving import Scheduler, SlotRequest
from keras_tfm.serving.process import free_port
from keras_tfm.serving.server import ServerThread
from tests.serving.conftest import MAX_LENGTH, MODEL

TIMEOUT = 120

# Bounded: at most 30 tokens, `{ "a" : "yz" , "b" : false }` and
# the end token (a character may take 4), within the 40 new tokens that the
# server's 64-position slots leave after the prompt.
SCHEMA = {
    "type": "object",
    "properties": {"a": {"enum": ["x", "yz"]}, "b": {"type": "boolean"}},
    "required": ["a", "b"],
}
FORMAT = {"type": "json_schema", "json_schema": {"name": "thing", "schema": SCHEMA}}
MESSAGES = [{"role": "user", "content": "hi"}]


def openai_client(url):
    return openai.OpenAI(
        base_url=url + "/v1", api_key="unused", max_retries=0, timeout=TIMEOUT
    )


@pytest.fixture(scope="module")
def client(server):
    return openai_client(server.url)


@pytest.fixture(scope="module")
def batch_server(chat_model):
    """One step per call: structured requests decode in the batch."""
    with ServerThread(
        chat_model, MODEL, port=free_port(), max_batch=4, max_length=MAX_LENGTH
    ) as server:  # fmt: skip
        yield server


@pytest.fixture(scope="module")
def batch_client(batch_server):
    return openai_client(batch_server.url)


def create(client, **kwargs):
    request = dict(model=MODEL, messages=MESSAGES, max_tokens=40, temperature=0)
    request.update(kwargs)
    return client.chat.completions.create(**request)


@pytest.mark.parametrize("where", ["batch_client", "client"])
def test_greedy_json_schema_answer_equals_generate(where, request, chat_model):
    client = request.getfixturevalue(where)
    reply = create(client, response_format=FORMAT)
    content = reply.choices[0].message.content
    jsonschema.validate(json.loads(content), SCHEMA)
    assert reply.choices[0].finish_reason == "stop"
    tokenizer = chat_model.tokenizer
    prompt = [int(i) for i in tokenizer(tokenizer.apply_chat_template(MESSAGES))]
    row = chat_model.generate(prompt, 40, response_format=FORMAT)
    assert content == tokenizer.detokenize(row[len(prompt) : -1])
    assert reply.usage.completion_tokens == len(row) - len(prompt)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_sampled_answers_validate(client, seed):
    reply = create(client, response_format=FORMAT, temperature=0.9, seed=seed)
    jsonschema.validate(json.loads(reply.choices[0].message.content), SCHEMA)


def test_json_object_streamed_and_completions(client):
    chunks = list(create(client, response_format={"type": "json_object"},
                         stream=True, max_tokens=40))  # fmt: skip
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    if chunks[-1].choices[0].finish_reason == "stop":  # else cut at max_tokens
        assert isinstance(json.loads(text), dict)
    else:
        assert text.startswith("{")
    completion = client.completions.create(
        model=MODEL, prompt="hi", max_tokens=40, temperature=0,
        extra_body={"response_format": FORMAT},
    )  # fmt: skip
    jsonschema.validate(json.loads(completion.choices[0].text), SCHEMA)


@pytest.mark.parametrize("response_format, kwargs, words", [
    ({"type": "json_schema", "json_schema": {"schema": {"type": "objecto"}}}, {},
     "Unsupported type: objecto"),
    ({"type": "json_schema", "json_schema": {"schema": {"type": "integer",
                                                        "minimum": 0}}}, {},
     "keyword 'minimum' is not supported"),
    ({"type": "json_schema", "json_schema": {"name": "x"}}, {}, '"json_schema"'),
    ({"type": "xml"}, {}, "must be an object whose \"type\" is one of"),
    ({"type": "json_object"}, dict(logprobs=True), "`logprobs` must be off"),
])  # fmt: skip
def test_malformed_formats_are_named_400s(client, response_format, kwargs, words):
    with pytest.raises(openai.BadRequestError) as caught:
        create(client, response_format=response_format, **kwargs)
    assert words in caught.value.body["message"]
    assert caught.value.body["param"] in ("response_format", "logprobs")


def test_the_batch_still_answers_beside_a_structured_request(client):
    plain = create(client, max_tokens=4)
    assert plain.choices[0].message.content is not None
    reply = create(client, response_format={"type": "text"}, max_tokens=4)
    assert reply.choices[0].message.content == plain.choices[0].message.content


def test_structured_answers_stream_token_by_token_in_the_batch(batch_client):
    chunks = list(create(batch_client, response_format=FORMAT, stream=True))
    pieces = [c.choices[0].delta.content for c in chunks if c.choices]
    pieces = [p for p in pieces if p]
    assert len(pieces) > 3  # beside the batch the answer came as one piece
    jsonschema.validate(json.loads("".join(pieces)), SCHEMA)


def test_the_batch_mixes_structured_and_plain_requests(batch_client, chat_model):
    # Each greedy answer alone, then all of them at once (4 slots, 6
    # requests: two wait for a slot): every answer is its alone answer.
    other = {"type": "json_schema", "json_schema": {"name": "n", "schema": {
        "type": "object", "properties": {"ok": {"type": "boolean"}},
        "required": ["ok"]}}}  # fmt: skip
    requests = [
        dict(response_format=FORMAT), dict(), dict(response_format=other),
        dict(max_tokens=12), dict(response_format={"type": "json_object"}),
        dict(response_format=FORMAT, presence_penalty=1.0),
    ]  # fmt: skip
    alone = [create(batch_client, **r).choices[0].message.content for r in requests]
    together_client = openai.AsyncOpenAI(
        base_url=batch_client.base_url, api_key="unused", max_retries=0,
        timeout=TIMEOUT,
    )  # fmt: skip

    async def all_at_once():
        base = dict(model=MODEL, messages=MESSAGES, max_tokens=40, temperature=0)
        replies = await asyncio.gather(*(
            together_client.chat.completions.create(**{**base, **r})
            for r in requests
        ))  # fmt: skip
        await together_client.close()
        return [reply.choices[0].message.content for reply in replies]

    assert asyncio.run(all_at_once()) == alone
    jsonschema.validate(json.loads(alone[0]), SCHEMA)
    assert isinstance(json.loads(alone[2])["ok"], bool)


def test_a_scheduler_of_several_steps_per_call_refuses_an_automaton(chat_model):
    scheduler = Scheduler(chat_model, 2, MAX_LENGTH, steps_per_call=2)
    automaton = grammar.cached_automaton(
        chat_model.tokenizer, chat_model.backbone.vocabulary_size, "ab|ac",
        (chat_model.preprocessor.end_token_id,),
    )  # fmt: skip
    request = SlotRequest([1, 2], 4, lambda t: False, lambda r: None,
                          automaton=automaton)  # fmt: skip
    with pytest.raises(ValueError, match="one decoding step per call"):
        scheduler.submit(request)

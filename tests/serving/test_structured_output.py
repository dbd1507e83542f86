"""`response_format` through the real `openai` client: every answer of the
random tiny chat model parses and validates; greedy answers equal
`generate(response_format=...)` on the same prompt; bad formats are 400s
that name the problem."""

import json

import jsonschema
import openai
import pytest

from tests.serving.conftest import MODEL

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


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(
        base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=TIMEOUT
    )


def create(client, **kwargs):
    request = dict(model=MODEL, messages=MESSAGES, max_tokens=40, temperature=0)
    request.update(kwargs)
    return client.chat.completions.create(**request)


def test_greedy_json_schema_answer_equals_generate(client, chat_model):
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

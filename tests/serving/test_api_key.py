"""`--api-key`: the real `openai` client with a wrong key, the right key and
none; /health and /metrics stay open."""

import httpx
import openai
import pytest

from keras_tfm.serving import command
from keras_tfm.serving.api_key import check_api_key
from keras_tfm.serving.process import free_port
from keras_tfm.serving.server import ServerThread
from tests.serving.conftest import MAX_LENGTH, MODEL, TIMEOUT

KEY = "sk-keras-tfm-test-0123456789"


@pytest.fixture(scope="module")
def keyed(chat_model):
    with ServerThread(
        chat_model, MODEL, port=free_port(), max_batch=2, max_length=MAX_LENGTH,
        api_key=KEY,
    ) as server:  # fmt: skip
        yield server


def client(server, key):
    return openai.OpenAI(
        base_url=server.url + "/v1", api_key=key, max_retries=0, timeout=TIMEOUT
    )


def ask(client):
    return client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=3,
        temperature=0,
    )  # fmt: skip


def test_the_right_key_works_and_a_wrong_one_is_refused(keyed):
    with client(keyed, KEY) as right:
        assert ask(right).usage.completion_tokens >= 1
        assert [m.id for m in right.models.list()] == [MODEL]
    for wrong in ("sk-wrong", KEY + "0", KEY[:-1]):
        with client(keyed, wrong) as refused, pytest.raises(
            openai.AuthenticationError
        ) as caught:  # fmt: skip
            ask(refused)
        assert caught.value.status_code == 401
        assert caught.value.code == "invalid_api_key"
        assert caught.value.body["type"] == "invalid_request_error"
        assert "Incorrect API key" in caught.value.body["message"]
        assert wrong not in caught.value.body["message"]  # never echoed
    with client(keyed, "sk-wrong") as refused, pytest.raises(
        openai.AuthenticationError
    ):  # fmt: skip
        refused.completions.create(model=MODEL, prompt="hell")


def test_without_a_bearer_key_the_answer_is_openais_401(keyed):
    for headers in ({}, {"Authorization": KEY}, {"Authorization": "Basic " + KEY},
                    {"Authorization": "Bearer"}):  # fmt: skip
        reply = httpx.post(
            keyed.url + "/v1/chat/completions", headers=headers, timeout=TIMEOUT,
            json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}]},
        )  # fmt: skip
        assert reply.status_code == 401
        assert reply.headers["www-authenticate"] == "Bearer"
        error = reply.json()["error"]
        assert set(error) == {"message", "type", "param", "code"}
        assert error["type"] == "invalid_request_error"
        assert error["code"] == "invalid_api_key" and error["param"] is None
        assert "Authorization header" in error["message"]
    # The scheme is case-insensitive, as HTTP's are.
    reply = httpx.get(keyed.url + "/v1/models", timeout=TIMEOUT,
                      headers={"Authorization": "bearer " + KEY})  # fmt: skip
    assert reply.status_code == 200
    # An unknown route is refused before it is looked up: nothing is learnt.
    assert httpx.get(keyed.url + "/v1/nothing", timeout=TIMEOUT).status_code == 401


def test_health_and_metrics_stay_open(keyed):
    assert httpx.get(keyed.url + "/health", timeout=TIMEOUT).json()["status"] == "ok"
    metrics = httpx.get(keyed.url + "/metrics", timeout=TIMEOUT)
    assert metrics.status_code == 200
    assert 'route="/v1/chat/completions",status="401"' in metrics.text


@pytest.mark.parametrize("key", ["", " padded ", "caf\u00e9", "tab\there", 42])
def test_a_key_that_cannot_travel_in_a_header_is_refused(key):
    with pytest.raises(ValueError, match="The API key must be"):
        check_api_key(key)


def test_the_command_reads_the_key_from_the_environment(monkeypatch):
    import argparse

    from keras_tfm.serving import server

    received = {}
    monkeypatch.setattr(server, "serve", lambda *a, **k: received.update(k))
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    monkeypatch.setenv("KERAS_TFM_API_KEY", "from-the-environment")
    command.run(parser.parse_args(["tiny"]), model=None)
    assert received["api_key"] == "from-the-environment"
    command.run(parser.parse_args(["tiny", "--api-key", "given"]), model=None)
    assert received["api_key"] == "given"
    monkeypatch.delenv("KERAS_TFM_API_KEY")
    command.run(parser.parse_args(["tiny"]), model=None)
    assert received["api_key"] is None

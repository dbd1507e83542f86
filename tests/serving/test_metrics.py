"""`GET /metrics`: Prometheus's text format, counting what was sent.

A server of its own (so that its counts start at zero) beside the package's
one (so that two apps in one process are seen to count apart); the
expected token counts are the responses' own `usage`.
"""

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from keras_tfm.serving.metrics import ServerMetrics
from keras_tfm.serving.process import free_port
from keras_tfm.serving.server import ServerThread
from tests.serving.conftest import MAX_LENGTH, MODEL, TIMEOUT


def scrape(url):
    """{(sample name, labels as a sorted tuple): value} of GET /metrics."""
    reply = httpx.get(url + "/metrics", timeout=TIMEOUT)
    assert reply.status_code == 200
    assert reply.headers["content-type"].startswith("text/plain; version=0.0.4")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(reply.text)
        for sample in family.samples
    }


def requests_total(samples, route, status):
    labels = (("route", route), ("status", str(status)))
    return samples.get(("keras_tfm_requests_total", labels), 0)


@pytest.mark.slow  # a server and a bounded load
def test_counts_equal_what_was_sent(chat_model, server):
    with ServerThread(
        chat_model, MODEL, port=free_port(), max_batch=2, max_length=MAX_LENGTH,
        steps_per_call=2,
    ) as fresh:  # fmt: skip
        client = openai.OpenAI(base_url=fresh.url + "/v1", api_key="unused",
                               max_retries=0, timeout=TIMEOUT)  # fmt: skip
        usages = []
        for content, max_tokens in [("hello", 6), ("world", 1), ("or", 9)]:
            usages.append(client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": content}],
                max_tokens=max_tokens, temperature=0,
            ).usage)  # fmt: skip
        chunks = list(client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "owl"}],
            max_tokens=5, temperature=0, stream=True,
            stream_options={"include_usage": True},
        ))  # fmt: skip
        usages.append(chunks[-1].usage)
        for prompt in ("hell", "rho"):
            usages.append(client.completions.create(
                model=MODEL, prompt=prompt, max_tokens=4, temperature=0
            ).usage)  # fmt: skip
        with pytest.raises(openai.BadRequestError):
            client.chat.completions.create(
                model=MODEL, messages="hi", max_tokens=4, temperature=0
            )
        with pytest.raises(openai.BadRequestError):  # too long: never submitted
            client.completions.create(model=MODEL, prompt="hi", max_tokens=10**6)
        assert httpx.get(fresh.url + "/nowhere", timeout=TIMEOUT).status_code == 404
        client.models.list()
        # The package's server answers too: it must not count here.
        openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0,
                      timeout=TIMEOUT).models.list()  # fmt: skip
        samples = scrape(fresh.url)

    assert requests_total(samples, "/v1/chat/completions", 200) == 4
    assert requests_total(samples, "/v1/chat/completions", 400) == 1
    assert requests_total(samples, "/v1/completions", 200) == 2
    assert requests_total(samples, "/v1/completions", 400) == 1
    assert requests_total(samples, "/v1/models", 200) == 1
    assert requests_total(samples, "other", 404) == 1
    assert requests_total(samples, "/metrics", 200) == 0  # counted once answered
    assert samples[("keras_tfm_prompt_tokens_total", ())] == sum(
        u.prompt_tokens for u in usages
    )
    assert samples[("keras_tfm_completion_tokens_total", ())] == sum(
        u.completion_tokens for u in usages
    )
    # One first-token time per generation; a per-token time per answer of 2+.
    first = "keras_tfm_time_to_first_token_seconds"
    assert samples[(first + "_count", ())] == len(usages)
    assert samples[(first + "_bucket", (("le", "+Inf"),))] == len(usages)
    assert 0 < samples[(first + "_sum", ())] < len(usages) * TIMEOUT
    per_token = "keras_tfm_time_per_output_token_seconds_count"
    assert samples[(per_token, ())] == sum(u.completion_tokens >= 2 for u in usages)
    buckets = sorted(
        (float(dict(labels)["le"]), value)
        for (name, labels), value in samples.items()
        if name == first + "_bucket"
    )
    assert [v for _, v in buckets] == sorted(v for _, v in buckets)  # cumulative
    assert samples[("keras_tfm_slots", ())] == 2
    assert samples[("keras_tfm_slots_in_use", ())] == 0
    assert samples[("keras_tfm_requests_waiting", ())] == 0


def test_slot_gauges_read_the_scheduler():
    class Scheduler:  # what the gauges read: the slots and busy()
        slots = ["a request", None, "another", None]

        def busy(self):
            return 2 + 3  # the two occupied slots and three waiting requests

    text = ServerMetrics(Scheduler()).render().decode()
    values = {
        sample.name: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }
    assert values["keras_tfm_slots"] == 4
    assert values["keras_tfm_slots_in_use"] == 2
    assert values["keras_tfm_requests_waiting"] == 3


def test_an_escaping_exception_is_counted_as_500():
    import asyncio

    from keras_tfm.serving.metrics import CountAnswers

    metrics = ServerMetrics(routes={"/v1/models"})

    async def failing_app(scope, receive, send):
        raise RuntimeError("boom")

    async def call():
        scope = {"type": "http", "path": "/v1/models"}
        with pytest.raises(RuntimeError, match="boom"):
            await CountAnswers(failing_app, metrics)(scope, None, None)

    asyncio.run(call())
    assert 'keras_tfm_requests_total{route="/v1/models",status="500"} 1.0' in (
        metrics.render().decode()
    )

"""`GET /metrics`: the server's counters in Prometheus's text format.

Made with `prometheus-client` (the Prometheus project's own Python
library), each app in a `CollectorRegistry` of its own rather than the
process-wide one, so that two servers in one process (tests, notebooks)
count apart. The names follow Prometheus's conventions (a unit suffix,
`_total` on counters) and vLLM's choice of what to count (docs/serving.md
has the table): requests by route and status, prompt tokens (and those
the prefix cache gave), completion tokens, time to first token and time
per output token (histograms, per request), requests waiting, slots in
use and slots.
"""

import time

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.exposition import choose_encoder
from starlette.responses import Response

# Seconds: from a tiny model's milliseconds to a long queue's minute.
FIRST_TOKEN_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60)
PER_TOKEN_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5)


class ServerMetrics:
    """The counters of one app, and the `/metrics` route that shows them.

    Args:
        scheduler: the app's `Scheduler` (its slots and queue become
            gauges), or None for a sentence encoder.
        routes: the paths counted by name; any other path (an unknown
            route) is counted as "other", so that a client cannot grow the
            label set.

    Example:
    >>> metrics = ServerMetrics(None, routes={"/health"})
    >>> metrics.answered("/health", 200)
    >>> metrics.answered("/nowhere", 404)
    >>> text = metrics.render().decode()
    >>> 'keras_tfm_requests_total{route="other",status="404"} 1.0' in text
    True
    """

    def __init__(self, scheduler=None, routes=()):
        self.registry = CollectorRegistry()
        self.routes = frozenset(routes)
        options = dict(registry=self.registry, namespace="keras_tfm")
        self.requests = Counter(
            "requests", "HTTP answers, by route and status.",
            ["route", "status"], **options,
        )  # fmt: skip
        self.prompt_tokens = Counter(
            "prompt_tokens", "Prompt tokens of the requests accepted.", **options
        )
        self.cached_prompt_tokens = Counter(
            "cached_prompt_tokens",
            "Prompt tokens the prefix cache gave (their keys and values reused).",
            **options,
        )
        self.completion_tokens = Counter(
            "completion_tokens",
            "Tokens generated (end tokens included).",
            **options,
        )
        self.time_to_first_token = Histogram(
            "time_to_first_token_seconds",
            "Seconds from a request's submission to its first token.",
            buckets=FIRST_TOKEN_BUCKETS,
            **options,
        )
        self.time_per_output_token = Histogram(
            "time_per_output_token_seconds",
            "Per request of two tokens or more: seconds from its first token "
            "to its last, over its tokens after the first.",
            buckets=PER_TOKEN_BUCKETS,
            **options,
        )
        if scheduler is not None:
            self._slot_gauges(scheduler, options)

    def _slot_gauges(self, scheduler, options):
        def in_use():
            return sum(slot is not None for slot in scheduler.slots)

        gauges = {
            "slots_in_use": ("Slots decoding a request.", in_use),
            # busy() counts the occupied slots and the queue together.
            "requests_waiting": (
                "Requests queued for a slot.",
                lambda: max(scheduler.busy() - in_use(), 0),
            ),
            "slots": (
                "The decoding slots (--max-batch).",
                lambda: len(scheduler.slots),
            ),
        }
        for name, (documentation, read) in gauges.items():
            Gauge(name, documentation, **options).set_function(read)

    def answered(self, path, status):
        """Counts one HTTP answer."""
        route = path if path in self.routes else "other"
        self.requests.labels(route=route, status=str(status)).inc()

    def watch(self, request):
        """Times a `SlotRequest` about to be submitted: wraps its `on_token`
        and `on_finish` (called in the worker thread) to observe the time
        to its first token and, at its end, its time per output token."""
        submitted = time.monotonic()
        seen = {"first": None, "last": None, "count": 0}
        on_token, on_finish = request.on_token, request.on_finish

        def timed_token(token):
            now = time.monotonic()
            if seen["first"] is None:
                seen["first"] = now
                self.time_to_first_token.observe(now - submitted)
                self.cached_prompt_tokens.inc(request.cached_tokens)
            seen["last"] = now
            seen["count"] += 1
            return on_token(token)

        def timed_finish(reason):
            if seen["count"] >= 2:
                self.time_per_output_token.observe(
                    (seen["last"] - seen["first"]) / (seen["count"] - 1)
                )
            on_finish(reason)

        request.on_token, request.on_finish = timed_token, timed_finish

    def render(self):
        """The registry in Prometheus's text format (bytes)."""
        return generate_latest(self.registry)

    async def route(self, request):
        """GET /metrics: the format the scraper's Accept header asks for
        (Prometheus's text format 0.0.4 by default, or OpenMetrics)."""
        encode, content_type = choose_encoder(request.headers.get("accept"))
        return Response(encode(self.registry), headers={"Content-Type": content_type})


class CountAnswers:
    """ASGI middleware: counts every HTTP answer by route and status (the
    errors the app's handlers turn into JSON included; an exception that
    escapes them is counted as a 500).

    Args:
        app: the ASGI application it wraps.
        metrics: a `ServerMetrics`.
    """

    def __init__(self, app, metrics):
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        status = []

        async def counting_send(message):
            if message["type"] == "http.response.start":
                status.append(message["status"])
                self.metrics.answered(scope["path"], message["status"])
            await send(message)

        try:
            await self.app(scope, receive, counting_send)
        except Exception:
            if not status:
                self.metrics.answered(scope["path"], 500)
            raise

"""`--api-key`: every route but `/health` and `/metrics` asks for the key.

A request must carry `Authorization: Bearer KEY` (what the `openai`
clients send as their `api_key`); one without it, or with another key, is
answered 401 with OpenAI's error JSON (`"code": "invalid_api_key"`), and
the key it sent is never echoed or logged. `/health` (load balancers,
orchestrators) and `/metrics` (Prometheus scrapers) stay open, as vLLM
leaves them: they show counts and timings, never a prompt or an answer.
"""

import hmac

from keras_tfm.serving.api_errors import ApiError

OPEN_PATHS = frozenset({"/health", "/metrics"})


def check_api_key(key):
    """`key` as given to `--api-key` (or `KERAS_TFM_API_KEY`); ValueError
    when it could not be sent in a header."""
    if not isinstance(key, str) or not key or key != key.strip():
        raise ValueError(
            "The API key must be a non-empty string without leading or trailing "
            f"whitespace. Received: a {type(key).__name__} of "
            f"{len(key) if isinstance(key, str) else 'no'} characters"
        )
    if not key.isprintable() or not key.isascii():
        raise ValueError(
            "The API key must be printable ASCII (it travels in an HTTP header). "
            f"Received: a string of {len(key)} characters with others"
        )
    return key


class RequireApiKey:
    """ASGI middleware: refuses HTTP requests without the bearer key.

    Args:
        app: the ASGI application it wraps.
        key: the key clients must send (`check_api_key`).
    """

    def __init__(self, app, key):
        self.app = app
        self.key = check_api_key(key).encode("ascii")

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["path"] not in OPEN_PATHS:
            refusal = self._refusal(dict(scope["headers"]).get(b"authorization"))
            if refusal is not None:
                response = refusal.response()
                response.headers["WWW-Authenticate"] = "Bearer"
                return await response(scope, receive, send)
        await self.app(scope, receive, send)

    def _refusal(self, header):
        """None when `header` carries the key, else the 401 to answer."""
        scheme, _, sent = (header or b"").partition(b" ")
        if header is None or scheme.lower() != b"bearer" or not sent.strip():
            received = "no Authorization header" if header is None else (
                "an Authorization header without a Bearer key"
            )  # fmt: skip
            return _invalid(
                "This server needs an API key: send it in an Authorization header "
                f"as 'Bearer KEY'. Received: {received}"
            )
        # compare_digest: the time taken does not tell how much of a key matched.
        if not hmac.compare_digest(sent.strip(), self.key):
            return _invalid(
                "Incorrect API key provided. Received: a bearer key of "
                f"{len(sent.strip())} characters that is not this server's"
            )
        return None


def _invalid(message):
    return ApiError(401, message, code="invalid_api_key")

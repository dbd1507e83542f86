"""The OpenAI error contract: `{"error": {message, type, param, code}}`."""

import json

from starlette.responses import JSONResponse


class ApiError(Exception):
    """A request the server refuses, answered as OpenAI's error JSON.

    Args:
        status: the HTTP status (400 bad request, 404 unknown model, 413 body
            too large, 503 shutting down...).
        message: what was wrong, quoting what was received.
        param: the request field at fault, or None.
        code: OpenAI's machine-readable code, or None.
    """

    def __init__(self, status, message, param=None, code=None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code

    def response(self):
        kind = "invalid_request_error" if self.status < 500 else "server_error"
        body = {
            "error": {
                "message": self.message,
                "type": kind,
                "param": self.param,
                "code": self.code,
            }
        }
        return JSONResponse(body, status_code=self.status)


async def read_json(request, limit):
    """The request's JSON body, read up to `limit` bytes (413 past it)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _too_large(int(declared), limit)
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise _too_large(len(body), limit)
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError) as error:
        raise ApiError(
            400,
            f"The request body is not valid JSON ({error}). Received: "
            f"{bytes(body[:80])!r}",
            code="invalid_json",
        ) from None


def _too_large(size, limit):
    return ApiError(
        413,
        f"The request body is larger than this server's limit of {limit} bytes "
        f"(`--max-body-bytes`). Received: {size} bytes",
        code="request_too_large",
    )

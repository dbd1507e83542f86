"""Running the app: `serve` (the command, in the foreground) and
`ServerThread` (in a thread of this process: tests and notebooks)."""

import signal
import threading
import time

import uvicorn

from keras_tfm.serving import defaults
from keras_tfm.serving.app import Service, build_app


def _config(service, host, port, log_level):
    # timeout_graceful_shutdown=None: on SIGTERM uvicorn stops accepting and
    # waits for every open request to finish, however long it streams.
    return uvicorn.Config(
        build_app(service), host=host, port=port, log_level=log_level,
        timeout_graceful_shutdown=None, lifespan="on",
    )  # fmt: skip


def serve(
    model, model_id, host=defaults.HOST, port=defaults.PORT,
    max_batch=defaults.MAX_BATCH, max_length=None,
    steps_per_call=defaults.STEPS_PER_CALL,
    max_body_bytes=defaults.MAX_BODY_BYTES, log_level="info", api_key=None,
    prefix_cache_mb=defaults.PREFIX_CACHE_MB, prefill_chunk=defaults.PREFILL_CHUNK,
):  # fmt: skip
    """Serves `model` over HTTP until SIGTERM or Ctrl-C (then exits cleanly).

    Binds 127.0.0.1 unless told otherwise. The arguments are those of
    `Service` (`api_key` None: no key asked for), plus the address and
    uvicorn's `log_level`.
    """
    service = Service(
        model, model_id, max_batch, max_length, steps_per_call, max_body_bytes,
        api_key, prefix_cache_mb, prefill_chunk,
    )  # fmt: skip
    # uvicorn shuts down gracefully on SIGTERM / SIGINT, then raises the
    # signal again under the handler it found: with these, that second
    # raise does nothing and a finished shutdown exits with status 0.
    handlers = {
        sig: signal.signal(sig, lambda *_: None)
        for sig in (signal.SIGTERM, signal.SIGINT)
    }
    try:
        uvicorn.Server(_config(service, host, port, log_level)).run()
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)


class ServerThread:
    """The server in a background thread, for tests and notebooks.

    Example:
    >>> from keras_tfm.serving.server import ServerThread  # doctest: +SKIP
    >>> with ServerThread(model, "my-model", port=8123) as server:  # doctest: +SKIP
    ...     print(server.url)
    http://127.0.0.1:8123
    """

    def __init__(
        self, model, model_id, host=defaults.HOST, port=defaults.PORT, **options
    ):
        self.service = Service(model, model_id, **options)
        self.url = f"http://{host}:{port}"
        self.server = uvicorn.Server(_config(self.service, host, port, "warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self):
        self.thread.start()
        deadline = time.monotonic() + 60
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"The server did not start on {self.url}.")
            time.sleep(0.05)
        return self

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join(120)

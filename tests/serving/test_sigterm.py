"""`keras-tfm serve` as a process: SIGTERM lets the request in flight finish,
then the process exits with status 0."""

import json
import signal
import threading

import httpx
import pytest

from keras_tfm.serving.process import free_port, start_server
from tests.serving.conftest import TIMEOUT


@pytest.mark.slow
def test_sigterm_finishes_the_request_in_flight_and_exits_0(chat_model, tmp_path):
    path = tmp_path / "tiny_chat.keras"
    chat_model.save(path)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = start_server(path, port, "--max-batch", 2, "--steps-per-call", 1)
    try:
        body = {"model": "tiny_chat", "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 60, "temperature": 0, "stream": True,
                "stream_options": {"include_usage": True}}  # fmt: skip
        lines, first = [], threading.Event()

        def read():
            with httpx.stream("POST", url + "/v1/chat/completions", json=body,
                              timeout=TIMEOUT) as reply:  # fmt: skip
                for line in reply.iter_lines():
                    lines.append(line)
                    first.set()

        reader = threading.Thread(target=read)
        reader.start()
        assert first.wait(TIMEOUT)
        server.send_signal(signal.SIGTERM)
        reader.join(TIMEOUT)
        assert server.wait(TIMEOUT) == 0
    finally:
        if server.poll() is None:
            server.kill()
    events = [line[6:] for line in lines if line.startswith("data: ")]
    # The whole answer came: its finish, its usage, then [DONE].
    assert events[-1] == "[DONE]"
    finish = json.loads(events[-3])["choices"][0]["finish_reason"]
    usage = json.loads(events[-2])["usage"]["completion_tokens"]
    assert (finish, usage) == ("length", 60) or (finish == "stop" and usage < 60)

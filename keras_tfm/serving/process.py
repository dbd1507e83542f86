"""`keras-tfm serve` in a child process, started and waited for: what the
load benchmark and the SIGTERM test run."""

import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request


def free_port():
    """A TCP port free on 127.0.0.1 at the time of asking."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_server(model, port, *options, timeout=600):
    """`keras-tfm serve MODEL --port PORT *options`, once /health answers.

    Returns the `subprocess.Popen`; its log goes to an unnamed temporary
    file (a pipe nobody reads would fill and block the server), quoted in
    the error if the server exits or does not answer within `timeout`
    seconds.
    """
    handle, log = tempfile.mkstemp(prefix="keras-tfm-serve-", suffix=".log")
    command = [sys.executable, "-m", "keras_tfm", "serve", str(model),
               "--port", str(port), *map(str, options)]  # fmt: skip
    try:
        process = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT)
    finally:
        os.close(handle)  # the child has its own descriptor
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                with urllib.request.urlopen(
                    f"http://127.0.0.1:{port}/health", timeout=5
                ) as reply:
                    if reply.status == 200:
                        return process
            except (urllib.error.URLError, OSError):
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                process.wait()
                with open(log, encoding="utf-8", errors="replace") as text:
                    tail = text.read()[-2000:]
                raise RuntimeError(
                    f"`{' '.join(command)}` did not start serving:\n{tail}"
                )
            time.sleep(0.5)
    finally:
        os.unlink(log)  # the server may go on writing to it, unnamed

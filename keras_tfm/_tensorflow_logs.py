"""TensorFlow's start-up lines, filtered while keras-tfm imports it.

- `TF_CPP_MIN_LOG_LEVEL` silences TensorFlow's and XLA's C++ logs below
  its level once absl logging is initialised (`I0000 ... service.cc`,
  `W0000 ... Ignoring Assert operator`, `E0000 ... failed call to cuInit`).
- A few lines are written *before* absl is initialised, whatever the
  environment says (`WARNING: All log messages before absl::InitializeLog()
  ...`, then `I0000 ... port.cc] oneDNN custom operations are on`,
  `cudart_stub.cc] Could not find cuda drivers`): absl writes those to file
  descriptor 2 unconditionally (abseil-cpp issue 1718). While TensorFlow is
  imported, file descriptor 2 goes through a filter that drops lines in
  absl's log format below the level and passes every other line on.

keras-tfm imports TensorFlow (or Keras, which imports it) inside
`quiet_tensorflow_import()`: at level 2 unless the user set
`TF_CPP_MIN_LOG_LEVEL`; the `keras-tfm` command (`keras_tfm.launcher`) at 3.
This module imports only the standard library.

Example:
>>> _dropped(b"I0000 00:00:1.000001   1 port.cc:153] oneDNN custom", 2)
True
>>> _dropped(b"a line of the user's", 3)
False
"""

import contextlib
import os
import re
import sys
import threading

# absl's log line prefix: severity, MMDD, time, thread id, file:line].
ABSL_LINE = re.compile(
    rb"^([IWEF]\d{4} \d\d:\d\d:\d+\.\d+ +\d+ [^\]\s]+:\d+\] |"
    rb"WARNING: All log messages before absl::InitializeLog\(\) is called)"
)

# The default of `TF_CPP_MIN_LOG_LEVEL` that keras-tfm sets as it imports
# TensorFlow: INFO and WARNING lines hidden, ERROR lines shown (the command
# hides those too: 3).
LIBRARY_LOG_LEVEL = "2"


def _dropped(line, level):
    """Whether absl's `line` is below `level` (TF_CPP_MIN_LOG_LEVEL's scale:
    1 drops INFO, 2 WARNING too, 3 ERROR too; FATAL always shows). absl's
    pre-init notice goes with the lines it announces (level 1 and up)."""
    if not ABSL_LINE.match(line):
        return False
    if line.startswith(b"WARNING: All log messages"):
        return level >= 1
    return "IWEF".index(chr(line[0])) < level


@contextlib.contextmanager
def drop_absl_lines_from_stderr(level=3, quiet_cuda_probe=False):
    """Within the block, lines absl writes to fd 2 below `level` are dropped
    (and, with `quiet_cuda_probe`, the ERROR line of a failed CUDA probe).

    `level` is on `TF_CPP_MIN_LOG_LEVEL`'s scale (see `_dropped`); every
    other line passes on. Where fd 2 cannot be redirected, nothing is dropped.
    """
    sys.stderr.flush()
    try:
        saved = os.dup(2)
    except OSError:  # no fd 2 (a detached process): nothing to filter
        yield
        return
    read, write = os.pipe()
    os.dup2(write, 2)
    os.close(write)

    def pump():
        with os.fdopen(read, "rb") as pipe:
            for line in pipe:
                probe = quiet_cuda_probe and CUDA_PROBE in line
                if not (probe or _dropped(line, level)):
                    os.write(saved, line)

    thread = threading.Thread(target=pump, name="keras-tfm-stderr", daemon=True)
    thread.start()
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)  # closes the pipe's only writer: the pump sees EOF
        thread.join(timeout=10)
        os.close(saved)


def quiet_tensorflow_import():
    """The context keras-tfm imports TensorFlow in, quiet unless asked not to.

    `TF_CPP_MIN_LOG_LEVEL` defaults to `LIBRARY_LOG_LEVEL` (a value the user
    set is kept), and absl's lines below it that TensorFlow writes before
    absl is initialised (which no setting silences) are dropped from fd 2.
    Once TensorFlow is imported, or with `TF_CPP_MIN_LOG_LEVEL=0`, it does
    nothing.
    """
    if "tensorflow" in sys.modules:
        return contextlib.nullcontext()
    level = os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", LIBRARY_LOG_LEVEL)
    try:
        level = int(level)
    except ValueError:  # TensorFlow reads a non-number as 0 too
        level = 0
    if level <= 0:
        return contextlib.nullcontext()
    return _quiet_import(level)


# TensorFlow's CUDA build probes the driver at its first device listing and
# logs an ERROR where there is none; on a machine without NVIDIA's driver it
# says nothing the user can act on.
CUDA_PROBE = b"failed call to cuInit"
NVIDIA_DRIVER = "/proc/driver/nvidia"


@contextlib.contextmanager
def _quiet_import(level):
    """`drop_absl_lines_from_stderr(level)`, and on a machine without NVIDIA's
    driver TensorFlow's devices listed inside it, so that its CUDA probe
    (`CUDA_PROBE`, an ERROR line) is dropped there rather than printed at
    the first operation. Listing physical devices leaves them configurable."""
    with drop_absl_lines_from_stderr(level, quiet_cuda_probe=level >= 2):
        yield
        tensorflow = sys.modules.get("tensorflow")
        if not os.path.exists(NVIDIA_DRIVER) and hasattr(tensorflow, "config"):
            tensorflow.config.list_physical_devices("GPU")

"""The `keras-tfm` console script: quiets TensorFlow, then runs `keras_tfm.cli`.

It lives outside the `keras_tfm` package because importing anything in that
package imports TensorFlow (the package registers its Keras classes on
import), and TensorFlow's C++ logging must be configured before then:

- `TF_CPP_MIN_LOG_LEVEL=3` silences TensorFlow's and XLA's C++ logs once
  absl logging is initialised (`I0000 ... service.cc`, `W0000 ... Ignoring
  Assert operator`, `E0000 ... failed call to cuInit`).
- A few lines are written *before* absl is initialised, whatever the
  environment says (`WARNING: All log messages before absl::InitializeLog()
  ...`, then `I0000 ... port.cc] oneDNN custom operations are on`,
  `cudart_stub.cc] Could not find cuda drivers`): absl writes those to file
  descriptor 2 unconditionally (abseil-cpp issue 1718). While TensorFlow is
  imported, file descriptor 2 goes through a filter that drops lines in
  absl's log format and passes every other line on.
  `import keras_tfm` does the same (`quiet_tensorflow_import`), at level 2
  and only where the user has not set `TF_CPP_MIN_LOG_LEVEL`.
- Python-side: the `tensorflow` and absl loggers are set to ERROR and
  warnings raised by dependencies are ignored (keras_tfm's own still show).

`keras-tfm ... --verbose` skips all of this.

Before any of it, a `keras-tfm chat "..."` whose model has a LiteRT entry in
the cache folder answers from it and returns, without importing TensorFlow
(`keras_tfm_lite.chat_command`).

It also spares the commands two imports they never use: Keras imports
scikit-learn (for `keras.wrappers`' estimators) and matplotlib (for
`keras.visualization`) when they are installed, ~2.5 of the ~10 CPU seconds
and 80 MB of `import keras_tfm` (benchmarks/cold_start.py). While
TensorFlow, Keras and keras_tfm are imported, both look absent
(`_deferred_imports`), as Keras allows (it then leaves those two features
out); afterwards they import normally.
"""

import contextlib
import importlib.abc
import logging
import os
import re
import sys
import threading
import warnings

# absl's log line prefix: severity, MMDD, time, thread id, file:line].
_ABSL_LINE = re.compile(
    rb"^([IWEF]\d{4} \d\d:\d\d:\d+\.\d+ +\d+ [^\]\s]+:\d+\] |"
    rb"WARNING: All log messages before absl::InitializeLog\(\) is called)"
)


# The default of `TF_CPP_MIN_LOG_LEVEL` that `import keras_tfm` sets: INFO and
# WARNING lines hidden, ERROR lines shown (the command hides those too: 3).
LIBRARY_LOG_LEVEL = "2"


def _dropped(line, level):
    """Whether absl's `line` is below `level` (TF_CPP_MIN_LOG_LEVEL's scale:
    1 drops INFO, 2 WARNING too, 3 ERROR too; FATAL always shows). absl's
    pre-init notice goes with the lines it announces (level 1 and up)."""
    if not _ABSL_LINE.match(line):
        return False
    if line.startswith(b"WARNING: All log messages"):
        return level >= 1
    return "IWEF".index(chr(line[0])) < level


@contextlib.contextmanager
def drop_absl_lines_from_stderr(level=3):
    """Within the block, lines absl writes to fd 2 below `level` are dropped.

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
                if not _dropped(line, level):
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
    """The context `keras_tfm` imports TensorFlow in, quiet unless asked not to.

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
    return drop_absl_lines_from_stderr(level)


# Imported by Keras if present, used by no keras-tfm command.
DEFERRED = ("sklearn", "matplotlib")


class _Absent(importlib.abc.MetaPathFinder):
    """An import finder for which the packages `names` are not installed."""

    def __init__(self, names):
        self.names = set(names)

    def find_spec(self, fullname, path, target=None):
        if fullname.partition(".")[0] in self.names:
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
        return None


@contextlib.contextmanager
def _deferred_imports(names=DEFERRED):
    """Within the block, the packages `names` cannot be imported (unless they
    already are); after it, they import as usual."""
    finder = _Absent(name for name in names if name not in sys.modules)
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)


def quiet():
    """Silences TensorFlow's C++ logs and dependencies' Python warnings.

    Call before TensorFlow is imported; it sets environment variables only
    where the user has not set them.
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ.setdefault("TF_CPP_MAX_VLOG_LEVEL", "-1")
    logging.getLogger("tensorflow").setLevel(logging.ERROR)
    try:
        from absl import logging as absl_logging
    except ImportError:  # absl comes with TensorFlow; without it, nothing to do
        pass
    else:
        absl_logging.set_verbosity(absl_logging.ERROR)
    warnings.filterwarnings("ignore")
    warnings.filterwarnings("default", module=r"keras_tfm(\.|$)")


def main(argv=None):
    """The `keras-tfm` command (see `keras_tfm.cli`)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    from keras_tfm_lite.chat_command import answer_from_cache

    if answer_from_cache(argv):  # a cached chat: TensorFlow is never imported
        return 0
    if "--verbose" in argv:
        # TensorFlow's own level (0) unless set: `import keras_tfm` would quiet it.
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "0")
        with _deferred_imports():
            from keras_tfm import cli
    else:
        quiet()
        with drop_absl_lines_from_stderr(), _deferred_imports():
            import tensorflow  # noqa: F401 (imported here to filter its start-up lines)

            from keras_tfm import cli
    return cli.main(argv)


if __name__ == "__main__":
    main()

"""One line on stderr before a wait a person would otherwise sit through in
silence (a first compile, a load): the `keras_tfm` logger.

The logger writes `keras-tfm: <message>` to stderr at level INFO, as
Hugging Face transformers' library logger writes its own lines, and does not
pass them on to the root logger (a program that configured logging would
see each line twice). Quiet it with
`logging.getLogger("keras_tfm").setLevel(logging.WARNING)` or
`KERAS_TFM_VERBOSITY=warning`; `KERAS_TFM_VERBOSITY=debug` shows more.

`slow_call_notice(what)` says `what` once a call has run for
`NOTICE_SECONDS` (2 s): a compile that takes 0.3 s prints nothing, one that
takes 20 s says so at 2 s.

Example:
>>> import time
>>> with slow_call_notice("compiling the decoding loop", seconds=60.0):
...     time.sleep(0.01)  # quick: nothing is printed
"""

import contextlib
import logging
import os
import sys
import threading

NOTICE_SECONDS = 2.0
"""How long a call runs before `slow_call_notice` says what it does."""

logger = logging.getLogger("keras_tfm")


def _configure(library_logger):
    """Gives the library logger its stderr line format and level, once."""
    if getattr(library_logger, "_keras_tfm_configured", False):
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("keras-tfm: %(message)s"))
    library_logger.addHandler(handler)
    library_logger.propagate = False
    level = os.environ.get("KERAS_TFM_VERBOSITY", "info").upper()
    if not isinstance(logging.getLevelName(level), int):
        level = "INFO"  # an unknown name must not stop the import
    library_logger.setLevel(level)
    library_logger._keras_tfm_configured = True


_configure(logger)


@contextlib.contextmanager
def slow_call_notice(what, seconds=None):
    """Logs `what` (INFO, `keras_tfm` logger) if the block is still running
    after `seconds` (default `NOTICE_SECONDS`); a quicker block logs
    nothing."""
    delay = NOTICE_SECONDS if seconds is None else seconds
    timer = threading.Timer(delay, logger.info, args=(what,))
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()

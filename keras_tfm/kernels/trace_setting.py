"""`TraceSetting`: a per-thread value that a `with` block sets while a graph is traced.

The scopes that change how a layer traces without changing its call
(`plain_scope.plain_kernels`, `rotated_inputs.rotated_down_projections`,
`kv_cache.read_window`) each keep one: a value per thread, so that two
threads tracing at once do not see each other's, and the previous value
back when the block ends, so that scopes nest.

Example:
>>> window = TraceSetting()
>>> with window.set(64):
...     with window.set(128):
...         inner = window.get()
...     outer = window.get()
>>> inner, outer, window.get()
(128, 64, None)
"""

import contextlib
import threading


class TraceSetting:
    """A per-thread value, `default` outside every `set` block."""

    def __init__(self, default=None):
        self._local = threading.local()
        self._default = default

    def get(self):
        """The value of the innermost `set` block of this thread, or the default."""
        return getattr(self._local, "value", self._default)

    @contextlib.contextmanager
    def set(self, value):
        """A block in which `get()` returns `value` on this thread."""
        previous = self.get()
        self._local.value = value
        try:
            yield
        finally:
            self._local.value = previous

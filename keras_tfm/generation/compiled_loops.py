"""The compiled decoding loops a model keeps, and the one hook that drops them.

A traced loop keeps reading the variables it captured: one traced before
`quantize`, `cast_weights` or `enable_lora` would go on using the float
weights without the adapters. Each of those calls `invalidate_compiled_loops`.
"""


class CompiledLoops:
    """Compiled functions by key, each built once by its factory.

    Example:
    >>> loops = CompiledLoops()
    >>> loops.get(("greedy",), lambda: "compiled")
    'compiled'
    >>> len(loops), loops.invalidate(), len(loops)
    (1, None, 0)
    """

    def __init__(self):
        self._functions = {}

    def get(self, key, factory):
        """The function for `key`, made by `factory()` the first time."""
        if key not in self._functions:
            self._functions[key] = factory()
        return self._functions[key]

    def values(self):
        return list(self._functions.values())

    def invalidate(self):
        """Forgets every compiled function: the next call traces again."""
        self._functions.clear()

    def __len__(self):
        return len(self._functions)


def invalidate_compiled_loops(model):
    """Drops the compiled loops of `model` and of every layer inside it."""
    layers = [model]
    if hasattr(model, "_flatten_layers"):
        layers = model._flatten_layers(include_self=True, recursive=True)
    for layer in layers:
        loops = getattr(layer, "compiled_loops", None)
        if isinstance(loops, CompiledLoops):
            loops.invalidate()

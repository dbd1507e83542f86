"""What generation does differently per Keras backend: compiling, and two ops.

Every loop of `keras_tfm.generation` is written on `keras.ops`; this module
is the one place that names a backend (and the only one of the package that
imports TensorFlow, lazily). `compile_loop` compiles a loop as keras-hub's
`CausalLM.make_generate_function` does: an XLA `tf.function` on TensorFlow,
`jax.jit` on JAX with the variables passed in through a
`keras.StatelessScope` (a jitted function must not close over the weights:
they would become constants of the program, stale after an update), and the
Python function under `torch.no_grad()` on PyTorch.

Example:
>>> import numpy as np
>>> from keras import ops
>>> add = compile_loop(lambda x, y: ops.add(x, y))
>>> int(add(np.int32(2), np.int32(3)))
5
>>> ops.convert_to_numpy(exclusive_cumsum(np.array([[1.0, 2.0, 4.0]]))).tolist()
[[0.0, 1.0, 3.0]]
"""

import functools

import keras

from keras_tfm._optional import tensorflow as tf
from keras_tfm.progress import slow_call_notice


def compile_loop(function, owners=(), jit_compile=True):
    """`function` compiled for the backend, retraced per input shape; a
    first call at a new shape that runs over two seconds says so on the
    `keras_tfm` logger (`keras_tfm.progress`).

    Args:
        function: a function of tensors (and nests of them) that reads the
            variables of `owners` (a model's weights, a sampler's seed).
        owners: the objects whose `.variables` it reads or assigns (JAX
            passes them in and writes back the ones it assigned).
        jit_compile: TensorFlow: compile with XLA (False traces a plain
            `tf.function`, quicker to build for tiny models). JAX always
            compiles.

    Returns:
        A function with `function`'s signature.
    """
    compiled = _compiled(function, owners, jit_compile)
    if keras.config.backend() not in ("tensorflow", "jax"):
        return compiled  # runs eagerly: there is no compile to announce
    return _NoticedFirstCalls(compiled, function)


def _compiled(function, owners, jit_compile):
    backend = keras.config.backend()
    if backend == "tensorflow":
        # No autograph: the loops are `ops.while_loop`s already, and
        # converting the layers' code on every trace cost a third of
        # tracing SmolLM2's decoding functions (benchmarks/cold_start.py).
        return tf.function(
            _traced_without_op_stacks(function),
            jit_compile=jit_compile,
            autograph=False,
        )
    if backend == "jax":
        return _jax_compiled(function, owners)
    if backend == "torch":
        return _torch_no_grad(function)
    return function


class _NoticedFirstCalls:
    """`compiled`, whose first call at each input signature runs under
    `slow_call_notice` (the compile is part of that call); its
    other attributes (a `tf.function`'s tracing count) are `compiled`'s."""

    def __init__(self, compiled, function):
        self._compiled = compiled
        name = getattr(function, "__name__", "function")
        self._name = name.strip("_").removesuffix("_function")
        self._seen = set()

    def __call__(self, *args, **kwargs):
        signature = _signature((args, kwargs))
        if signature in self._seen:
            return self._compiled(*args, **kwargs)
        shape = next((s for s, _ in signature if isinstance(s, tuple) and s), ())
        what = f"compiling `{self._name}` for inputs of shape {list(shape)}"
        with slow_call_notice(f"{what} (once per input shape)"):
            outputs = self._compiled(*args, **kwargs)
        self._seen.add(signature)
        return outputs

    def __getattr__(self, name):
        return getattr(self._compiled, name)


def _signature(arguments):
    """What a compiled function is retraced for: each array's shape and
    dtype, each Python value itself."""
    signature = []
    for leaf in keras.tree.flatten(arguments):
        shape = getattr(leaf, "shape", None)
        if shape is not None:
            signature.append((tuple(shape), str(getattr(leaf, "dtype", ""))))
        elif isinstance(leaf, (bool, int, float, str, type(None))):
            signature.append((leaf, type(leaf).__name__))
        else:
            signature.append((type(leaf).__name__, ""))
    return tuple(signature)


def _traced_without_op_stacks(function):
    """`function`, whose ops record no Python stack while it is traced:
    XLA would keep each op's stack as strings for as long as the program
    lives (453 MiB for SmolLM2's four loops; `keras_tfm._op_stack_traces`)."""
    from keras_tfm._op_stack_traces import without_op_stack_traces

    @functools.wraps(function)
    def traced(*args, **kwargs):
        with without_op_stack_traces():
            return function(*args, **kwargs)

    return traced


def _torch_no_grad(function):
    """PyTorch runs the loop eagerly, as keras-hub does: without autograd's
    records of every step (which cost time and hold every step's tensors)."""
    import torch

    @functools.wraps(function)
    def decoded(*args, **kwargs):
        with torch.no_grad():
            return function(*args, **kwargs)

    return decoded


def _variables(owners):
    unique = {}
    for owner in owners:
        for variable in owner.variables:
            unique.setdefault(id(variable), variable)
    return list(unique.values())


def _jax_compiled(function, owners):
    import jax

    traced = {}  # the variables of the call being traced

    @jax.jit
    def stateless(values, args, kwargs):
        variables = traced["variables"]
        mapping = list(zip(variables, values, strict=True))
        with keras.StatelessScope(state_mapping=mapping) as scope:
            given = dict(scope.state_mapping)
            outputs = function(*args, **kwargs)
        current = [scope.state_mapping[id(v)] for v in variables]
        # Only what the function assigned comes back (not every weight).
        updates = [
            None if value is given[id(v)] else value
            for v, value in zip(variables, current, strict=True)
        ]
        return outputs, updates

    def call(*args, **kwargs):
        variables = _variables(owners)
        traced["variables"] = variables
        outputs, updates = stateless([v.value for v in variables], args, kwargs)
        for variable, value in zip(variables, updates, strict=True):
            if value is not None:
                variable.assign(value)
        return outputs

    return call


def bitcast_to_uint32(x):
    """int32 `x`'s bits as uint32 (`keras.ops.view` reads the static shape
    and refuses an exported graph's unknown batch size)."""
    if keras.config.backend() == "tensorflow":
        return tf.bitcast(x, "uint32")
    from keras import ops

    return ops.view(x, "uint32")


def exclusive_cumsum(x):
    """The cumulative sum along the last axis of the entries before each one.

    `keras.ops.cumsum` has no `exclusive=`; TensorFlow's own keeps the
    sampler's top-p cut bit-identical to what it always was.
    """
    if keras.config.backend() == "tensorflow":
        return tf.cumsum(x, axis=-1, exclusive=True)
    from keras import ops

    shifted = ops.pad(x[..., :-1], [(0, 0)] * (len(x.shape) - 1) + [(1, 0)])
    return ops.cumsum(shifted, axis=-1)

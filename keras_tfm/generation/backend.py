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


def compile_loop(function, owners=(), jit_compile=True):
    """`function` compiled for the backend, retraced per input shape.

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

"""Every private Keras API keras-tfm uses, in one place.

Keras has no public equivalent for any of these (checked against the version
pinned in pyproject.toml, `keras>=3.15,<3.16`). When Keras changes one, this
is the only file to fix; `tests/test_keras_compat.py` calls each of them.
"""

import contextlib
import gc

from keras.src import backend as _backend
from keras.src.quantizers import utils as _quantizer_utils
from keras.src.saving import saving_lib as _saving_lib


def get_keras_mask(tensor):
    """The Keras mask of `tensor`, or None.

    Why private: a tensor's mask (set by `Embedding(mask_zero=True)` or a
    loss) has no public getter; keras-hub imports the same function.
    """
    return _backend.get_keras_mask(tensor)


def set_keras_mask(tensor, mask):
    """Attaches `mask` to `tensor` as its Keras mask.

    Why private: no public setter; a loss sets it so that metrics skip the
    ignored positions.
    """
    _backend.set_keras_mask(tensor, mask)


def compiled_metrics(model):
    """The metrics `compile(metrics=..., weighted_metrics=...)` named, or None.

    Why private: a model overriding `compute_metrics` has no public way to
    ask whether any were compiled.
    """
    return model._compile_metrics


def flatten_layers(layer, include_self=True, recursive=True):
    """`layer` and every sublayer, depth first.

    Why private: `Layer._flatten_layers` is the only walk that reaches layers
    held in lists and dicts; the public `layer.layers` is one level only.
    """
    return list(layer._flatten_layers(include_self=include_self, recursive=recursive))


def should_quantize_layer(layer, filters):
    """Keras's own decision whether `quantize(filters=...)` applies to `layer`.

    Why private: reused so that our filter composes with the user's exactly as
    `Model.quantize` composes them.
    """
    return _quantizer_utils.should_quantize_layer(layer, filters)


def save_weights_only(model, filepath, objects_to_skip):
    """`model.save_weights` without `objects_to_skip` (e.g. the optimizer).

    Why private: the public `save_weights` has no switch to leave the
    optimizer state out.
    """
    _saving_lib.save_weights_only(model, filepath, objects_to_skip=objects_to_skip)


def symbolic_build(model, batch):
    """Builds a compiled model (and its metrics) on `batch`, once, then never again.

    Why private: `fit` builds through `_maybe_symbolic_build`, which averages
    a distributed batch first; `keras_tfm.distribute` builds on a plain batch
    instead and turns the automatic build off.
    """
    model._symbolic_build(data_batch=batch)
    model._maybe_symbolic_build = lambda *args, **kwargs: None


# keras-hub's MaskedLMMaskGenerator keyword that forces its TensorFlow path:
# without it, eager calls return Python lists and a different random stream.
MASK_GENERATOR_TF_ONLY = {"_allow_python_workflow": False}


def replace_variable(layer, attribute, values, name):
    """Replaces the built `layer.<attribute>` variable by a non-trainable one
    holding `values` (their shape and dtype), tracked as the old one was.

    Why private: a built layer's tracker is locked against new variables;
    Keras's own `quantize` unlocks it (`Layer._tracker`) the same way.
    """
    layer._tracker.unlock()
    try:
        if attribute in vars(layer):  # a new attribute is only added
            delattr(layer, attribute)
        variable = layer.add_weight(
            name=name,
            shape=values.shape,
            initializer="zeros",
            dtype=str(values.dtype),
            trainable=False,
        )
        variable.assign(values)
        setattr(layer, attribute, variable)
    finally:
        layer._tracker.lock()


@contextlib.contextmanager
def one_garbage_collection():
    """Runs `gc.collect()` once on leaving instead of at every call inside.

    Why: Keras's `Layer.__delattr__` collects garbage for every variable it
    drops, 0.3 s each with TensorFlow loaded, so quantizing SmolLM2's 211
    matrices took 98 s; one collection at the end frees the same memory.
    """
    collect = gc.collect
    gc.collect = lambda generation=2: 0
    try:
        yield
    finally:
        gc.collect = collect
        gc.collect()


_UNINITIALIZED = "uninitialized_variables"


@contextlib.contextmanager
def deferred_variables():
    """Variables created inside the block are left uninitialised; the list
    it yields holds them after the block (`initialize_deferred` fills each).

    Why private: `keras.StatelessScope(initialize_variables=False)` defers
    them (public), but they wait in Keras's global list of uninitialised
    variables, which the next stateless scope would initialise with their
    random initializers; they are taken out of it here, and given values
    through the variable's deferred initializer.
    """
    import keras
    from keras.src.backend.common import global_state

    before = list(global_state.get_global_attribute(_UNINITIALIZED, None) or [])
    created = []
    try:
        with keras.StatelessScope(initialize_variables=False):
            yield created
    finally:
        pending = global_state.get_global_attribute(_UNINITIALIZED, None) or []
        known = {id(v) for v in before}
        created.extend(v for v in pending if id(v) not in known)
        global_state.set_global_attribute(_UNINITIALIZED, before)


def initialize_deferred(variable, value=None):
    """Initialises a variable of `deferred_variables` with `value` (an array
    of its shape), or with its own initializer when `value` is None."""
    if value is not None:
        variable._initializer = lambda shape, dtype: value
    variable._deferred_initialize()

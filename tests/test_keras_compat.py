"""Each private Keras API keras-tfm relies on still behaves as we use it.

If Keras changes one of them, the failure names it here rather than deep
inside a model; `keras_tfm/_keras_compat.py` is then the one file to fix.
"""

import keras
import keras_hub
import numpy as np
import pytest

from keras_tfm import _keras_compat as compat
from tests.builders import causal_lm


def test_masks_are_set_and_read():
    tensor = keras.ops.ones((2, 3))
    assert compat.get_keras_mask(tensor) is None
    mask = keras.ops.convert_to_tensor([[True, False, True]] * 2)
    compat.set_keras_mask(tensor, mask)
    np.testing.assert_array_equal(compat.get_keras_mask(tensor), mask)
    embedded = keras.layers.Embedding(5, 2, mask_zero=True)(np.array([[1, 0]]))
    np.testing.assert_array_equal(compat.get_keras_mask(embedded), [[True, False]])


def tiny_lm():
    return causal_lm(
        vocabulary_size=11,
        num_layers=2,
        num_heads=2,
        hidden_dim=8,
        intermediate_dim=16,
        max_sequence_length=8,
    )


def test_flatten_layers_reaches_layers_held_in_lists():
    model = tiny_lm()
    layers = compat.flatten_layers(model)
    assert layers[0] is model
    assert model.backbone.transformer_layers[1].self_attention.query_dense in layers
    assert model not in compat.flatten_layers(model, include_self=False)


def test_should_quantize_layer_applies_keras_filters():
    dense = keras.layers.Dense(2, name="keep_me")
    assert compat.should_quantize_layer(dense, None)
    assert compat.should_quantize_layer(dense, "keep")
    assert not compat.should_quantize_layer(dense, "other")


def test_save_weights_only_skips_the_given_objects(tmp_path):
    model = tiny_lm()
    model.compile(optimizer="adam", loss="mse")
    model.optimizer.build(model.trainable_variables)
    path = tmp_path / "model.weights.h5"
    compat.save_weights_only(model, str(path), objects_to_skip=[model.optimizer])
    import h5py

    with h5py.File(path) as f:
        assert "optimizer" not in f
    clone = tiny_lm()
    clone.load_weights(path)
    ids = np.array([[1, 2, 3]])
    np.testing.assert_array_equal(clone(ids), model(ids))


def test_symbolic_build_builds_once_and_turns_the_automatic_build_off():
    model = tiny_lm()
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    batch = (np.array([[1, 2, 3]]), np.array([[2, 3, 4]]))
    compat.symbolic_build(model, batch)
    assert model.optimizer.built
    assert model._maybe_symbolic_build() is None  # now a no-op


def test_the_mask_generator_keyword_forces_tensors_out():
    generator = keras_hub.layers.MaskedLMMaskGenerator(
        vocabulary_size=10,
        mask_selection_rate=0.5,
        mask_token_id=1,
        mask_selection_length=2,
        **compat.MASK_GENERATOR_TF_ONLY,
    )
    outputs = generator(np.array([[3, 4, 5, 6]]))
    assert not isinstance(outputs["token_ids"], list)


@pytest.mark.parametrize(
    "module", ["keras_tfm", "keras_tfm.layers", "keras_tfm.models"]
)
def test_no_other_module_imports_keras_src(module):
    import importlib
    import pathlib

    package = pathlib.Path(importlib.import_module(module).__file__).parent
    offenders = [
        str(path)
        for path in package.rglob("*.py")
        if path.name != "_keras_compat.py" and "keras.src" in path.read_text()
    ]
    assert not offenders


def test_replace_variable_keeps_it_tracked_and_the_layer_locked():
    dense = keras.layers.Dense(3)
    dense.build((None, 4))
    values = np.arange(12, dtype="int8").reshape(3, 4)
    compat.replace_variable(dense, "_kernel", values, name="kernel")
    assert [w is dense._kernel for w in dense.non_trainable_weights] == [True]
    assert not any(w is dense._kernel for w in dense.trainable_weights)
    assert len(dense.weights) == 2 and dense._kernel.dtype == "int8"
    np.testing.assert_array_equal(np.asarray(dense._kernel), values)
    with pytest.raises(ValueError, match="locked|cannot add new elements"):
        dense.add_weight(shape=(1,), name="late")


def test_one_garbage_collection_collects_once_on_leaving():
    import gc
    import weakref

    class Node:
        pass

    collect = gc.collect
    with compat.one_garbage_collection():
        node = Node()
        node.cycle = node
        alive = weakref.ref(node)
        del node
        assert gc.collect() == 0 and alive() is not None  # deferred
    assert alive() is None  # collected on leaving
    assert gc.collect is collect


def test_deferred_variables_wait_for_their_values_and_leave_no_trace():
    from keras.src.backend.common import global_state

    calls = []

    def initializer(shape, dtype=None):
        calls.append(shape)
        return np.full(shape, 7.0, "float32")

    before = list(global_state.get_global_attribute("uninitialized_variables", []))
    with compat.deferred_variables() as created:
        dense = keras.layers.Dense(3, kernel_initializer=initializer)
        dense.build((None, 2))
    assert [v.path for v in created] == [w.path for w in dense.weights]
    assert calls == []  # no value computed yet
    pending = global_state.get_global_attribute("uninitialized_variables", [])
    assert [id(v) for v in pending] == [id(v) for v in before]
    values = np.arange(6, dtype="float32").reshape(2, 3)
    compat.initialize_deferred(dense.kernel, values)
    compat.initialize_deferred(dense.bias)  # its own initializer: zeros
    assert calls == []  # the kernel's initializer never ran
    np.testing.assert_array_equal(dense(np.ones((1, 2), "float32")), [[3, 5, 7]])

"""Weight-only int8 `QuantizableDense` and tied `TokenEmbedding` logits.

The int8 kernel is held output-major so that a one-row product reads int8
bytes under XLA; these tests pin the values against Keras's own int8 Dense
and a float64 reference, the file layout against Keras's, and, in the
optimized HLO of a decoding-like loop, that no float32 copy of the weights
is made (the copy XLA hoists out of a loop unless it is kept inside).
"""

import re

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_tfm.kernels.weight_only_matmul import weight_only_matmul
from keras_tfm.layers import QuantizableDense, TokenEmbedding
from keras_tfm.models import int8_weight_only_config

UNITS, INPUT_DIM = 96, 64


def dense_pair(activation=None):
    """(ours, Keras's Dense) with the same float weights, both weight-only int8."""
    rng = np.random.default_rng(0)
    weights = [
        rng.normal(size=(INPUT_DIM, UNITS)).astype("float32"),
        rng.normal(size=UNITS).astype("float32"),
    ]
    layers = []
    for klass in (QuantizableDense, keras.layers.Dense):
        layer = klass(UNITS, activation=activation)
        layer.build((None, INPUT_DIM))
        layer.set_weights(weights)
        layer.quantize("int8", config=int8_weight_only_config())
        layers.append(layer)
    return layers


def float64_reference(layer, x):
    kernel = np.asarray(layer.kernel, "float64") / np.asarray(layer.kernel_scale)
    return np.asarray(x, "float64") @ kernel + np.asarray(layer.bias, "float64")


def test_kernel_is_output_major_with_keras_values():
    ours, theirs = dense_pair()
    assert ours.output_major and tuple(ours._kernel.shape) == (UNITS, INPUT_DIM)
    assert tuple(ours.kernel.shape) == (INPUT_DIM, UNITS)
    np.testing.assert_array_equal(np.asarray(ours.kernel), np.asarray(theirs.kernel))
    np.testing.assert_array_equal(
        ours.kernel_scale.numpy(), theirs.kernel_scale.numpy()
    )


@pytest.mark.parametrize("shape", [(1, INPUT_DIM), (1, 1, INPUT_DIM), (5, INPUT_DIM),
                                   (2, 3, INPUT_DIM)])  # fmt: skip
@pytest.mark.parametrize("jit", [False, True])
def test_outputs_equal_the_dequantized_float64_product(shape, jit):
    ours, theirs = dense_pair(activation="relu")
    x = np.random.default_rng(1).normal(size=shape).astype("float32")
    call = tf.function(ours, jit_compile=True) if jit else ours
    expected = np.maximum(float64_reference(ours, x), 0)
    np.testing.assert_allclose(np.asarray(call(x)), expected, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(np.asarray(call(x)), np.asarray(theirs(x)), atol=1e-4)


def test_a_nan_input_spoils_only_its_own_row():
    ours, _ = dense_pair()
    x = np.random.default_rng(2).normal(size=(3, INPUT_DIM)).astype("float32")
    x[1, 5] = np.nan
    y = np.asarray(ours(x))
    assert np.isnan(y[1]).all() and np.isfinite(y[[0, 2]]).all()
    np.testing.assert_allclose(y[[0, 2]], float64_reference(ours, x[[0, 2]]),
                               rtol=1e-5, atol=1e-4)  # fmt: skip
    assert np.isnan(np.asarray(ours(x[1:2]))).all()  # the one-row path


def test_files_keep_keras_layout_both_ways():
    ours, theirs = dense_pair()
    our_store, their_store = {}, {}
    ours.save_own_variables(our_store)
    theirs.save_own_variables(their_store)
    assert our_store.keys() == their_store.keys()
    for key in our_store:
        np.testing.assert_array_equal(np.asarray(our_store[key]),
                                      np.asarray(their_store[key]))  # fmt: skip
    fresh, _ = dense_pair()
    fresh._kernel.assign(np.zeros((UNITS, INPUT_DIM), "int8"))
    fresh.load_own_variables(their_store)
    x = np.ones((1, INPUT_DIM), "float32")
    np.testing.assert_array_equal(np.asarray(fresh(x)), np.asarray(ours(x)))


def test_lora_on_weight_only_int8_is_refused_by_name():
    ours, _ = dense_pair()
    with pytest.raises(ValueError, match=f"'{ours.name}'.*LoRA"):
        ours.enable_lora(4)


def optimized_loop_hlo(step, rows):
    """Optimized HLO of an XLA while-loop calling `step` on `rows` rows."""

    @tf.function(jit_compile=True)
    def loop(x):
        body = lambda i, x: (i + 1, step(x)[..., :INPUT_DIM])  # noqa: E731
        return tf.while_loop(lambda i, x: i < 4, body, (0, x))[1]

    x = tf.ones((rows, 1, INPUT_DIM))
    return loop.experimental_get_compiler_ir(x)(stage="optimized_hlo")


def float_copies(hlo, first, second):
    """Instructions that write a float32 (first, second) or (second, first)
    array to memory: those outside the computations fusions call (a fusion's
    own instructions stay in registers)."""
    fused = set(re.findall(r"calls=(%[\w.-]+)", hlo))
    computations = re.split(r"\n(?=\S)", hlo)
    shapes = (f"f32[{first},{second}]", f"f32[{second},{first}]")
    return [
        line.strip()
        for computation in computations
        if computation.split(" ", 1)[0].removeprefix("ENTRY ") not in fused
        for line in computation.splitlines()[1:]
        if any(f"= {shape}" in line for shape in shapes)
    ]


def test_one_row_loop_reads_int8_and_never_a_float32_copy():
    ours, _ = dense_pair()
    assert not any(float_copies(optimized_loop_hlo(ours, rows=1), UNITS, INPUT_DIM))
    # Several rows convert once, to the input-major layout XLA's CPU matmul
    # is fast with (output-major it decoded SmolLM2 at batch 8 1.3-1.5x slower).
    copies = float_copies(optimized_loop_hlo(ours, rows=2), UNITS, INPUT_DIM)
    assert any(f"= f32[{INPUT_DIM},{UNITS}]{{1,0}}" in copy for copy in copies)


def tied_embedding():
    embedding = TokenEmbedding(UNITS, INPUT_DIM)
    embedding.build((None, None))
    table = np.random.default_rng(3).normal(size=(UNITS, INPUT_DIM))
    embedding.set_weights([table.astype("float32")])
    embedding.quantize("int8", config=int8_weight_only_config())
    return embedding


@pytest.mark.parametrize("rows", [1, 3])
def test_tied_logits_equal_the_dequantized_float64_product(rows):
    embedding = tied_embedding()
    table = np.asarray(embedding._embeddings, "float64")
    table = table / np.asarray(embedding.embeddings_scale)[:, None]
    hidden = np.random.default_rng(4).normal(size=(rows, 1, INPUT_DIM))
    logits = embedding(hidden.astype("float32"), reverse=True)
    np.testing.assert_allclose(np.asarray(logits), hidden @ table.T, rtol=1e-5,
                               atol=1e-4)  # fmt: skip


def test_one_row_logits_loop_never_copies_the_table_to_float32():
    embedding = tied_embedding()

    def step(x):
        return embedding(x, reverse=True)

    assert not any(float_copies(optimized_loop_hlo(step, rows=1), UNITS, INPUT_DIM))


def test_weight_only_int8_matmul_example_by_hand():
    kernel = np.array([[127, 0], [-127, 64]], "int8")
    scale = np.array([127.0, 64.0], "float32")
    x = np.array([[2.0, 3.0]], "float32")
    expected = [[2.0, (2 * -127 + 3 * 64) / 64]]
    for rows in (x, np.repeat(x, 2, axis=0)):
        y = np.asarray(weight_only_matmul(rows, kernel, scale))
        np.testing.assert_allclose(y, np.repeat(expected, len(rows), axis=0))


@pytest.mark.parametrize("rows", [1, 3])
def test_mixed_bfloat16_computes_in_bfloat16(rows):
    dense = QuantizableDense(UNITS, dtype="mixed_bfloat16")
    dense.build((None, INPUT_DIM))
    dense.quantize("int8", config=int8_weight_only_config())
    x = np.random.default_rng(5).normal(size=(rows, INPUT_DIM)).astype("float32")
    y = dense(x)
    assert keras.backend.standardize_dtype(y.dtype) == "bfloat16"
    expected = float64_reference(dense, x)
    error = np.abs(np.asarray(y, "float64") - expected).max()
    assert error <= 0.02 * np.abs(expected).max()  # bfloat16 keeps 8 bits

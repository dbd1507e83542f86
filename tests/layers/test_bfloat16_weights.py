"""Weight-only bfloat16: `cast_weights("bfloat16")` of our Dense and TokenEmbedding.

The weights are rounded to bfloat16 once (ml_dtypes' rounding is the
reference) and held output-major; every product then runs in the inputs'
float dtype, so the outputs equal a float64 product with the rounded weights
to float32 rounding. The HLO check is the one the int8 form passes: a one-row
loop converts the weights inside the product, never into a float32 copy.
"""

import keras
import ml_dtypes
import numpy as np
import pytest
import tensorflow as tf

from keras_tfm.layers import QuantizableDense, TokenEmbedding

from .test_quantizable_dense import float_copies, optimized_loop_hlo

UNITS, INPUT_DIM = 96, 64


def rounded(values):
    """float64 values of `values` rounded to bfloat16, independently of Keras."""
    return np.asarray(values, "float32").astype(ml_dtypes.bfloat16).astype("float64")


def bfloat16_dense(activation=None):
    rng = np.random.default_rng(0)
    kernel = rng.normal(size=(INPUT_DIM, UNITS)).astype("float32")
    bias = rng.normal(size=UNITS).astype("float32")
    layer = QuantizableDense(UNITS, activation=activation)
    layer.build((None, INPUT_DIM))
    layer.set_weights([kernel, bias])
    layer.cast_weights("bfloat16")
    return layer, kernel, bias


def test_kernel_is_rounded_once_and_held_output_major():
    layer, kernel, _ = bfloat16_dense()
    assert layer.output_major and layer._kernel.dtype == "bfloat16"
    assert tuple(layer._kernel.shape) == (UNITS, INPUT_DIM)
    np.testing.assert_array_equal(np.asarray(layer.kernel, "float64"), rounded(kernel))
    assert layer.bias.dtype == "float32"  # only the matrix is stored narrower


@pytest.mark.parametrize("shape", [(1, INPUT_DIM), (1, 1, INPUT_DIM), (5, INPUT_DIM),
                                   (2, 3, INPUT_DIM)])  # fmt: skip
@pytest.mark.parametrize("jit", [False, True])
def test_outputs_equal_the_float64_product_of_the_rounded_kernel(shape, jit):
    layer, kernel, bias = bfloat16_dense(activation="relu")
    x = np.random.default_rng(1).normal(size=shape).astype("float32")
    call = tf.function(layer, jit_compile=True) if jit else layer
    y = call(x)
    assert y.dtype == "float32"
    expected = np.maximum(x.astype("float64") @ rounded(kernel) + bias, 0)
    np.testing.assert_allclose(np.asarray(y), expected, rtol=1e-5, atol=1e-4)


def test_a_nan_input_spoils_only_its_own_row():
    layer, kernel, bias = bfloat16_dense()
    x = np.random.default_rng(2).normal(size=(3, INPUT_DIM)).astype("float32")
    x[1, 5] = np.nan
    y = np.asarray(layer(x))
    assert np.isnan(y[1]).all() and np.isfinite(y[[0, 2]]).all()
    expected = x[[0, 2]].astype("float64") @ rounded(kernel) + bias
    np.testing.assert_allclose(y[[0, 2]], expected, rtol=1e-5, atol=1e-4)
    assert np.isnan(np.asarray(layer(x[1:2]))).all()  # the one-row path


def test_files_hold_the_keras_layout_and_load_back():
    layer, kernel, _ = bfloat16_dense()
    store = {}
    layer.save_own_variables(store)
    assert np.asarray(store["0"]).shape == (INPUT_DIM, UNITS)
    np.testing.assert_array_equal(np.asarray(store["0"], "float64"), rounded(kernel))
    fresh, _, _ = bfloat16_dense()
    fresh._kernel.assign(np.zeros((UNITS, INPUT_DIM), ml_dtypes.bfloat16))
    fresh.load_own_variables(store)
    x = np.ones((1, INPUT_DIM), "float32")
    np.testing.assert_array_equal(np.asarray(fresh(x)), np.asarray(layer(x)))


def test_lora_and_a_second_quantization_are_refused_by_name():
    layer, _, _ = bfloat16_dense()
    with pytest.raises(ValueError, match=f"'{layer.name}'.*LoRA"):
        layer.enable_lora(4)
    with pytest.raises(ValueError, match=f"'{layer.name}' already holds bfloat16"):
        layer.quantize("int8")
    with pytest.raises(ValueError, match=f"'{layer.name}' is quantized already"):
        layer.cast_weights("bfloat16")
    with pytest.raises(ValueError, match="dtype='float16'"):
        layer_of_float16 = QuantizableDense(UNITS)
        layer_of_float16.build((None, INPUT_DIM))
        layer_of_float16.cast_weights("float16")
    with pytest.raises(ValueError, match="not built"):
        QuantizableDense(UNITS).cast_weights("bfloat16")
    lora = QuantizableDense(UNITS)
    lora.build((None, INPUT_DIM))
    lora.enable_lora(2)
    with pytest.raises(ValueError, match="LoRA enabled"):
        lora.cast_weights("bfloat16")


def test_one_row_loop_never_copies_the_kernel_to_float32():
    layer, _, _ = bfloat16_dense()
    assert not any(float_copies(optimized_loop_hlo(layer, rows=1), UNITS, INPUT_DIM))
    # Several rows convert once, to the input-major layout XLA's CPU matmul
    # is fast with (output-major it decoded SmolLM2 at batch 8 1.3-1.5x slower).
    copies = float_copies(optimized_loop_hlo(layer, rows=2), UNITS, INPUT_DIM)
    assert any(f"= f32[{INPUT_DIM},{UNITS}]{{1,0}}" in copy for copy in copies)


def bfloat16_embedding(tie_weights=True):
    embedding = TokenEmbedding(
        UNITS, INPUT_DIM, tie_weights=tie_weights, mask_zero=True
    )
    embedding.build((None, None))
    rng = np.random.default_rng(3)
    tables = [rng.normal(size=w.shape).astype("float32") for w in embedding.weights]
    embedding.set_weights(tables)
    embedding.cast_weights("bfloat16")
    return embedding, tables


@pytest.mark.parametrize("tie_weights", [True, False])
def test_embedding_lookup_and_logits_use_the_rounded_tables(tie_weights):
    embedding, tables = bfloat16_embedding(tie_weights)
    assert embedding.bfloat16_weights
    assert all(w.dtype == "bfloat16" for w in embedding.weights)
    ids = np.array([[5, 7, 0]])
    vectors = embedding(ids)
    assert vectors.dtype == "float32"
    np.testing.assert_array_equal(
        np.asarray(vectors, "float64"), rounded(tables[0])[ids]
    )
    np.testing.assert_array_equal(np.asarray(keras.ops.convert_to_numpy(vectors._keras_mask)),
                                  [[True, True, False]])  # fmt: skip
    reverse = rounded(tables[0]).T if tie_weights else rounded(tables[1])
    for rows in (1, 3):
        hidden = np.random.default_rng(rows).normal(size=(rows, 1, INPUT_DIM))
        logits = embedding(hidden.astype("float32"), reverse=True)
        np.testing.assert_allclose(np.asarray(logits), hidden @ reverse, rtol=1e-5,
                                   atol=1e-4)  # fmt: skip


def test_embedding_refuses_lora_and_an_unbuilt_cast():
    embedding, _ = bfloat16_embedding()
    with pytest.raises(ValueError, match=f"'{embedding.name}'.*LoRA"):
        embedding.enable_lora(2)
    with pytest.raises(ValueError, match="not built"):
        TokenEmbedding(UNITS, INPUT_DIM).cast_weights("bfloat16")


def test_embedding_save_load_round_trip():
    embedding, _ = bfloat16_embedding()
    store = {}
    embedding.save_own_variables(store)
    fresh, _ = bfloat16_embedding()
    fresh._embeddings.assign(np.zeros((UNITS, INPUT_DIM), ml_dtypes.bfloat16))
    fresh.load_own_variables(store)
    np.testing.assert_array_equal(
        np.asarray(fresh._embeddings), np.asarray(embedding._embeddings)
    )


def test_one_row_logits_loop_never_copies_the_table_to_float32():
    embedding, _ = bfloat16_embedding()

    def step(x):
        return embedding(x, reverse=True)

    assert not any(float_copies(optimized_loop_hlo(step, rows=1), UNITS, INPUT_DIM))


@pytest.mark.parametrize("module", ["quantized_weights", "layers.token_embedding",
                                    "kernels.weight_only_matmul"])  # fmt: skip
def test_docstring_examples(module):
    import doctest
    import importlib

    import keras_tfm

    module = importlib.import_module(f"keras_tfm.{module}")
    result = doctest.testmod(module, extraglobs={"np": np, "keras_tfm": keras_tfm})
    assert result.attempted > 0 and result.failed == 0

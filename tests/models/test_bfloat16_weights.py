"""`model.cast_weights("bfloat16")`: bfloat16 weight matrices, float activations.

Drift: rounding a weight to bfloat16 moves it by at most 2^-9 of its
magnitude, so one matmul's output by at most sum_i |x_i w_ij| 2^-9 (checked
exactly on the logits layer below); through the fixture's two blocks the
logits stay within RELATIVE_TOLERANCE (3%) of the largest float logit, a
dropped conversion or a transposed table moves them by 50% or more.
"""

import keras
import numpy as np
import pytest

from keras_tfm.models import int8_weight_only_config
from tests.builders import causal_lm

from .test_quantization import (
    RELATIVE_TOLERANCE,
    SMALL,
    Toy,
    save_and_load,
    tiny_llama,
    weight_dtypes,
)


def matrix_dtypes(model):
    return {w.path: str(w.dtype) for w in model.weights if len(w.shape) == 2}


@pytest.mark.parametrize("name", ["llama_tied", "llama_gqa"])
def test_all_matrices_bfloat16_and_logits_close(name):
    model = tiny_llama(name)
    x = np.random.default_rng(0).integers(3, model.vocabulary_size, (2, 12))
    reference = np.asarray(model(x))
    model.cast_weights("bfloat16")
    assert model.quantized_to == "bfloat16"
    assert set(matrix_dtypes(model).values()) == {"bfloat16"}
    assert {str(w.dtype) for w in model.weights if len(w.shape) == 1} == {"float32"}
    logits = model(x)
    assert logits.dtype == "float32"
    error = np.max(np.abs(np.asarray(logits) - reference))
    assert 0 < error <= RELATIVE_TOLERANCE * np.max(np.abs(reference))


def test_logits_layer_within_the_rounding_bound():
    model = tiny_llama()
    table = np.asarray(model.backbone.token_embedding.embeddings, "float64")  # (V, D)
    hidden = np.random.default_rng(1).normal(size=(3, 1, table.shape[1]))
    reference = hidden @ table.T
    model.cast_weights("bfloat16")
    logits = np.asarray(
        model.backbone.token_embedding(hidden.astype("float32"), reverse=True)
    )
    bound = np.abs(hidden) @ np.abs(table).T * 2.0**-9
    error = np.abs(logits - reference)
    assert np.all(error <= bound + 1e-5)
    assert error.max() > 0.05 * bound.max()  # it is rounding, not float


def test_greedy_equal_on_the_fixture():
    model = tiny_llama()
    prompts = [[5, 17, 42, 9], [100, 7]]
    expected = model.generate(prompts, max_new_tokens=10)
    model.cast_weights("bfloat16")
    assert model.generate(prompts, max_new_tokens=10) == expected


def test_save_load_exact_and_file_smaller(tmp_path):
    model = tiny_llama()
    float_path = tmp_path / "float.keras"
    model.save(float_path)
    float_bytes = sum(w.numpy().nbytes for w in model.weights)
    model.cast_weights("bfloat16")
    bfloat16_bytes = sum(w.numpy().nbytes for w in model.weights)
    x = np.array([[5, 17, 42, 9, 3]])
    logits = np.asarray(model(x))
    restored = save_and_load(model, tmp_path)
    assert restored.quantized_to == "bfloat16"
    assert weight_dtypes(restored) == weight_dtypes(model)
    np.testing.assert_array_equal(np.asarray(restored(x)), logits)
    saved = float_path.stat().st_size - (tmp_path / "model.keras").stat().st_size
    assert saved >= 0.9 * (float_bytes - bfloat16_bytes)


def test_other_modes_after_bfloat16_and_back_are_refused():
    model = causal_lm(vocabulary_size=50, num_layers=1, **SMALL)
    model.cast_weights("bfloat16")
    with pytest.raises(ValueError, match="quantized to 'bfloat16' already"):
        model.quantize("int8", config=int8_weight_only_config())
    model = causal_lm(vocabulary_size=50, num_layers=1, **SMALL)
    model.quantize("int8")
    with pytest.raises(ValueError, match="quantized to 'int8' already"):
        model.cast_weights("bfloat16")


def test_a_keras_dense_is_named_and_nothing_changes():
    model = Toy()
    with pytest.raises(ValueError, match="dense'.*Dense.*mode='bfloat16'"):
        model.cast_weights("bfloat16")
    assert all(w.dtype == "float32" for w in model.weights)
    assert keras.backend.standardize_dtype(model.dense.kernel.dtype) == "float32"

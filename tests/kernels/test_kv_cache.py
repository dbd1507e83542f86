"""The int8 key/value cache: quantization against NumPy, and cached decoding
with it close to the float cache."""

import doctest

import keras
import numpy as np
import pytest
from keras import ops

import keras_tfm
from keras_tfm.generation import kv_cache_dtype, set_kv_cache_dtype
from keras_tfm.generation.decoder_steps import DecoderSteps
from keras_tfm.kernels import kv_cache
from tests.builders import causal_lm


def quantize_reference(x):
    """Symmetric per-vector int8 in float64: scale = max|x| / 127."""
    x = np.asarray(x, "float64")
    largest = np.abs(x).max(axis=-1, keepdims=True)
    scale = np.where(largest > 0, largest / 127.0, 1.0)
    return np.clip(np.round(x / scale), -127, 127), scale


def test_quantize_and_dequantize_against_numpy():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 2, 5, 3, 16)).astype("float32") * rng.uniform(
        0.01, 10, size=(2, 2, 5, 3, 1)
    ).astype("float32")
    x[0, 0, 0, 0] = 0.0  # an all-zero vector keeps scale 1 and zeros
    q, scale = kv_cache.quantize(x)
    expected_q, expected_scale = quantize_reference(x)
    assert ops.convert_to_numpy(q).dtype == np.int8
    np.testing.assert_allclose(ops.convert_to_numpy(scale), expected_scale, rtol=1e-6)
    # Rounding may differ where x / scale sits within float32 noise of .5.
    assert np.abs(ops.convert_to_numpy(q) - expected_q).max() <= 1
    assert np.mean(ops.convert_to_numpy(q) == expected_q) > 0.999
    restored = ops.convert_to_numpy(kv_cache.dequantize(q, scale))
    # Each number is within half a step (plus float32 rounding) of itself.
    assert np.all(np.abs(restored - x) <= expected_scale / 2 * (1 + 1e-5) + 1e-7)


def test_write_then_read_round_trips_at_the_index():
    cache = kv_cache.empty_cache((1, 2, 6, 2, 4), "float32", "int8")
    key = np.arange(16, dtype="float32").reshape(1, 2, 2, 4) - 7
    value = -key
    cache = kv_cache.write(cache, 3, key, value)
    keys, values = (ops.convert_to_numpy(t) for t in kv_cache.read(cache, "float32"))
    q, scale = quantize_reference(np.stack([key, value], axis=1))
    np.testing.assert_allclose(keys[:, 3:5], (q * scale)[:, 0], rtol=1e-6)
    np.testing.assert_allclose(values[:, 3:5], (q * scale)[:, 1], rtol=1e-6)
    assert not keys[:, :3].any() and not keys[:, 5:].any()


@pytest.mark.parametrize("storage", [None, "int8"])
def test_a_window_reads_the_first_positions_of_keys_and_values(storage):
    rng = np.random.default_rng(1)
    cache = kv_cache.empty_cache((1, 2, 8, 2, 4), "float32", storage)
    key, value = (rng.normal(size=(1, 8, 2, 4)).astype("float32") for _ in "kv")
    cache = kv_cache.write(cache, 0, key, value)
    whole = [ops.convert_to_numpy(t) for t in kv_cache.read(cache, "float32")]
    with kv_cache.read_window(3):
        cut = [ops.convert_to_numpy(t) for t in kv_cache.read(cache, "float32")]
    for part, full in zip(cut, whole, strict=True):
        np.testing.assert_array_equal(part, full[:, :3])
    # Keys and values are not swapped (read back against what was written).
    np.testing.assert_allclose(cut[1], value[:, :3], atol=0.05 if storage else 0)


def test_int8_cache_bytes_are_over_3_5x_smaller():
    shape = (1, 2, 8192, 3, 64)  # one SmolLM2 block at 8k tokens
    full = kv_cache.cache_bytes(kv_cache.empty_cache(shape, "float32"))
    small = kv_cache.cache_bytes(kv_cache.empty_cache(shape, "float32", "int8"))
    assert full == 8192 * 2 * 3 * 64 * 4
    assert small == 8192 * 2 * 3 * (64 + 4)
    assert full / small > 3.5


def test_cached_decoding_with_int8_is_close_to_float():
    keras.utils.set_random_seed(1)
    model = causal_lm(
        vocabulary_size=40, num_layers=2, num_heads=4, num_key_value_heads=2,
        hidden_dim=32, intermediate_dim=64, max_sequence_length=32,
        position_encoding="rotary", normalization="rms_norm", use_bias=False,
    )  # fmt: skip
    tokens = np.random.default_rng(2).integers(1, 40, size=(1, 24))
    steps = DecoderSteps(model)

    def stepwise_logits():
        caches = steps.empty_cache(1, 32)
        out = []
        for i in range(tokens.shape[1]):
            logits, caches = steps(tokens[:, i : i + 1], caches, ops.array(i))
            out.append(ops.convert_to_numpy(logits)[0, 0])
        return np.array(out), caches

    float_logits, float_caches = stepwise_logits()
    # The float cache reproduces the uncached pass.
    np.testing.assert_allclose(
        float_logits, ops.convert_to_numpy(model(tokens))[0], atol=1e-4
    )
    assert set_kv_cache_dtype(model, "int8") == 2
    try:
        int8_logits, int8_caches = stepwise_logits()
    finally:
        set_kv_cache_dtype(model, None)
    assert isinstance(int8_caches[0], kv_cache.Int8Cache)
    # Stated tolerance: logits within 2% of their range, same argmax.
    spread = float_logits.max() - float_logits.min()
    assert np.abs(int8_logits - float_logits).max() < 0.02 * spread
    assert 0 < np.abs(int8_logits - float_logits).max()  # it is quantized
    np.testing.assert_array_equal(
        int8_logits.argmax(-1), float_logits.argmax(-1)
    )
    # 4 bytes a number against 1, plus a 4-byte scale per head_dim (8) numbers.
    ratio = kv_cache.cache_bytes(float_caches) / kv_cache.cache_bytes(int8_caches)
    assert ratio == pytest.approx(4 * 8 / (8 + 4))


def test_bad_kv_cache_dtype_is_refused():
    with pytest.raises(ValueError, match="Received: kv_cache_dtype='int4'"):
        kv_cache.empty_cache((1, 2, 4, 1, 2), "float32", "int4")
    with pytest.raises(ValueError, match="no attention layer"):
        set_kv_cache_dtype(keras.layers.Dense(2), "int8")


@pytest.mark.parametrize(
    "module", [kv_cache, kv_cache_dtype], ids=lambda m: m.__name__
)
def test_docstring_examples(module):
    result = doctest.testmod(
        module, extraglobs={"np": np, "ops": ops, "keras_tfm": keras_tfm}
    )
    assert result.attempted > 0 and result.failed == 0

"""Int8 blocks: a GGUF file's Q4/Q8 blocks kept packed and dequantised in XLA.

References are independent of the code under test: gguf's NumPy
`dequantize` (ggml-org's package) for the blocks, float64 NumPy products for
`block_matmul`, and the float32 model loaded from the same file for the
logits.
"""

import gguf
import gguf.quants
import keras
import numpy as np
import pytest
from keras import ops

from keras_tfm.convert import gguf_blocks, gguf_llama
from keras_tfm.kernels.weight_only_matmul import block_matmul, dequantize_blocks
from keras_tfm.quantized_weights import QuantizableDense, int8_blocks
from tests.builders import causal_lm
from tests.convert.tiny_gguf import Q, write_tiny_llama


class _Tensor:
    def __init__(self, weights, kind):
        self.tensor_type = kind
        self.data = gguf.quants.quantize(weights, kind)


@pytest.mark.parametrize("kind", [Q.Q4_0, Q.Q4_1, Q.Q8_0])
def test_blocks_dequantise_to_gguf_reference(kind):
    weights = np.random.default_rng(0).normal(size=(6, 96)).astype("float32")
    tensor = _Tensor(weights, kind)
    values, scale, offset = gguf_blocks.int8_blocks(tensor, (6, 96))
    assert values.dtype == np.int8 and scale.shape == offset.shape == (6, 3)
    reference = gguf.quants.dequantize(tensor.data, kind)
    ours = ops.convert_to_numpy(dequantize_blocks(values, scale, offset))
    np.testing.assert_array_equal(ours, reference)


def test_other_types_are_left_to_the_caller():
    weights = np.ones((2, 32), "float32")
    assert gguf_blocks.int8_blocks(_Tensor(weights, Q.F16), (2, 32)) is None


@pytest.mark.parametrize("rows", [1, 3])
def test_block_matmul_against_float64(rows):
    rng = np.random.default_rng(1)
    values = rng.integers(-127, 128, size=(5, 64)).astype("int8")
    scale = rng.uniform(0.01, 0.1, size=(5, 2)).astype("float16")
    offset = rng.uniform(-0.5, 0.5, size=(5, 2)).astype("float16")
    x = rng.normal(size=(rows, 64)).astype("float32")
    weights = values.reshape(5, 2, 32).astype("float64") * scale[..., None].astype(
        "float64"
    ) + offset[..., None].astype("float64")
    want = x.astype("float64") @ weights.reshape(5, 64).T
    ours = ops.convert_to_numpy(block_matmul(x, values, scale, offset))
    np.testing.assert_allclose(ours, want, rtol=1e-5, atol=1e-5)


def test_symmetric_blocks_of_float_weights_are_within_their_bound():
    weights = np.random.default_rng(2).normal(size=(4, 64)).astype("float32")
    values, scale, offset = int8_blocks(weights)
    back = values.astype("float64").reshape(4, 2, 32) * scale[..., None]
    bound = np.abs(weights.reshape(4, 2, 32)).max(-1, keepdims=True) / 254
    # Plus float16's rounding of the scale: 2^-11 relative, times 127 steps.
    slack = np.abs(weights.reshape(4, 2, 32)).max(-1, keepdims=True) * 2**-11
    assert np.all(np.abs(back - weights.reshape(4, 2, 32)) <= bound + slack)
    assert not offset.any()


def test_hold_blocks_refuses_a_wrong_shape():
    dense = QuantizableDense(2, use_bias=False)
    dense.build((None, 64))
    with pytest.raises(ValueError, match=r"shape \(2, 64\).*Received: shape=\(2, 32\)"):
        dense.hold_blocks(np.ones((2, 32), "int8"), np.ones((2, 2)), np.ones((2, 2)))


@pytest.fixture(scope="module")
def tiny_pair(tmp_path_factory):
    path = tmp_path_factory.mktemp("blocks") / "tiny.gguf"
    write_tiny_llama(path, seed=3)  # Q4_1 matrices, a Q8_0 embedding
    packed = gguf_llama.load_gguf_llama(path, weights="int8_blocks")
    return gguf_llama.load_gguf_llama(path), packed


IDS = np.array([[5, 200, 17, 90, 261, 3, 44, 120]])


def test_gguf_blocks_give_the_float32_logits(tiny_pair):
    full, packed = tiny_pair
    assert packed.quantized_to == "int8_blocks"
    kernel = packed.backbone.get_layer("transformer_layer_0").feed_forward.output_dense
    assert kernel._kernel.dtype == "int8"
    embedding = packed.backbone.get_layer("token_embedding")
    assert embedding.block_weights and embedding._embeddings.dtype == "int8"
    want = np.asarray(full(IDS))
    np.testing.assert_allclose(np.asarray(packed(IDS)), want, rtol=1e-5, atol=1e-5)


def test_gguf_blocks_decode_as_float32(tiny_pair):
    # Cached decoding takes the one-row path of block_matmul.
    full, packed = tiny_pair
    want = full.generate(IDS, 6, sampler="greedy")
    np.testing.assert_array_equal(packed.generate(IDS, 6, sampler="greedy"), want)


def test_int8_blocks_survive_keras_saving(tmp_path):
    model = causal_lm(vocabulary_size=50, num_layers=1, num_heads=2, hidden_dim=32,
                      intermediate_dim=64, max_sequence_length=16)  # fmt: skip
    model.cast_weights("int8_blocks")
    path = tmp_path / "blocks.keras"
    model.save(path)
    loaded = keras.models.load_model(path)
    assert loaded.quantized_to == "int8_blocks"
    ids = np.array([[1, 2, 3, 4]])
    np.testing.assert_array_equal(np.asarray(loaded(ids)), np.asarray(model(ids)))

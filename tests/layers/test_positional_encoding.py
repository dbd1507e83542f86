import numpy as np
import pytest
from keras import ops

from keras_tfm.layers import PositionalEncoding
from tests.builders import causal_lm
from tests.layers import numpy_reference as ref
from tests.layers.layer_harness import run_layer_test


@pytest.mark.parametrize("d_model", [8, 7, 64])
def test_matches_the_papers_formula(d_model):
    x = np.random.default_rng(0).normal(size=(2, 40, d_model)).astype("float32")
    out = np.asarray(PositionalEncoding()(x))
    expected = x + ref.positional_encoding(40, d_model)
    np.testing.assert_allclose(out, expected, atol=1e-5, rtol=0)


def test_even_dimensions_are_sine_and_odd_are_cosine():
    pe = np.asarray(PositionalEncoding()(np.zeros((1, 3, 4), "float32")))[0]
    np.testing.assert_allclose(pe[:, 0], np.sin([0, 1, 2]), atol=1e-6)
    np.testing.assert_allclose(pe[:, 1], np.cos([0, 1, 2]), atol=1e-6)
    np.testing.assert_allclose(pe[:, 2], np.sin(np.arange(3) / 100.0), atol=1e-6)


def marian_table(num_positions, dim):
    """HuggingFace's MarianSinusoidalPositionalEmbedding.create_weight, in NumPy."""
    position_enc = np.array(
        [[pos / np.power(10000, 2 * (j // 2) / dim) for j in range(dim)]
         for pos in range(num_positions)]
    )  # fmt: skip
    out = np.empty((num_positions, dim))
    sentinel = dim // 2 if dim % 2 == 0 else dim // 2 + 1
    out[:, :sentinel] = np.sin(position_enc[:, 0::2])
    out[:, sentinel:] = np.cos(position_enc[:, 1::2])
    return out


@pytest.mark.parametrize("d_model", [8, 7, 32])
def test_split_layout_is_marians_table(d_model):
    layer = PositionalEncoding(interleave=False)
    out = np.asarray(layer(np.zeros((1, 50, d_model), "float32")))[0]
    np.testing.assert_allclose(out, marian_table(50, d_model), atol=1e-5, rtol=0)
    step = np.asarray(layer(np.zeros((1, 1, d_model), "float32"), start_index=17))
    np.testing.assert_allclose(step[0, 0], out[17], atol=1e-6)
    assert PositionalEncoding.from_config(layer.get_config()).interleave is False


def test_start_index_gives_the_later_positions():
    layer = PositionalEncoding()
    x = np.zeros((1, 10, 16), "float32")
    full = np.asarray(layer(x))
    for start in (0, 3, 9):
        step = np.asarray(layer(x[:, :1], start_index=start))
        np.testing.assert_allclose(step[0, 0], full[0, start], atol=1e-6)
    tensor_start = np.asarray(layer(x[:, :2], start_index=ops.convert_to_tensor(4)))
    np.testing.assert_allclose(tensor_start[0], full[0, 4:6], atol=1e-6)


def test_long_sequences_stay_accurate():
    # float32 rounds the angle pos * freq; the error grows with pos (~1e-4 at 5k).
    out = np.asarray(PositionalEncoding()(np.zeros((1, 5000, 32), "float32")))[0]
    np.testing.assert_allclose(out, ref.positional_encoding(5000, 32), atol=1e-3)


def test_passes_the_mask_through():
    x = ops.convert_to_tensor(np.ones((1, 3, 4), "float32"))
    mask = ops.convert_to_tensor([[True, True, False]])
    x._keras_mask = mask
    out = PositionalEncoding()(x)
    np.testing.assert_array_equal(np.asarray(out._keras_mask), np.asarray(mask))


def test_layer_contract(tmp_path):
    x = np.random.default_rng(0).normal(size=(2, 5, 8)).astype("float32")
    run_layer_test(
        PositionalEncoding,
        {"inputs": x},
        expected_output_shape=(2, 5, 8),
        tmp_path=tmp_path,
    )


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"max_wavelength": 0}, "max_wavelength=0"),
        ({"max_wavelength": "x"}, "'x'"),
        ({"interleave": "no"}, "interleave='no'"),
    ],
)
def test_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        PositionalEncoding(**kwargs)


def test_wrong_rank_is_refused():
    with pytest.raises(ValueError, match=r"inputs.shape=\(5, 8\)"):
        PositionalEncoding()(np.zeros((5, 8), "float32"))


def test_summary_of_a_model_holding_position_layers():

    for encoding in ("sinusoidal", "sinusoidal_split", "rotary", "learned"):
        model = causal_lm(32, 1, 2, 16, 32, 16, position_encoding=encoding)
        model(np.array([[3, 4]]))
        model.summary(print_fn=lambda *args, **kwargs: None)

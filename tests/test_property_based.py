"""Property-based checks of the layers over random shapes, masks and dtypes:
no NaN, padded positions change nothing, the future changes nothing."""

import keras
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from keras_tfm import layers

SETTINGS = settings(
    max_examples=12,
    deadline=None,
    derandomize=True,  # reproducible in CI
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


@st.composite
def cases(draw):
    batch = draw(st.integers(1, 3))
    seq = draw(st.integers(1, 6))
    num_heads = draw(st.sampled_from([1, 2]))
    hidden = num_heads * draw(st.sampled_from([2, 4]))
    dtype = draw(st.sampled_from(["float32", "bfloat16"]))
    # At least one real token per row, or none at all (a fully padded row).
    lengths = draw(st.lists(st.integers(0, seq), min_size=batch, max_size=batch))
    seed = draw(st.integers(0, 2**16))
    return batch, seq, num_heads, hidden, dtype, np.array(lengths), seed


def inputs_and_mask(batch, seq, hidden, lengths, seed, scale=1.0):
    rng = np.random.default_rng(seed)
    x = (scale * rng.normal(size=(batch, seq, hidden))).astype("float32")
    mask = np.arange(seq)[None, :] < lengths[:, None]
    return x, mask


def numpy(tensor):
    return keras.ops.convert_to_numpy(keras.ops.cast(tensor, "float32"))


def tolerance(dtype):
    return 3e-2 if dtype == "bfloat16" else 1e-5


def make(kind, num_heads, hidden, dtype):
    if kind == "attention":
        return layers.MultiHeadSelfAttention(num_heads=num_heads, dtype=dtype)
    if kind == "encoder":
        return layers.TransformerEncoderBlock(
            num_heads=num_heads, intermediate_dim=2 * hidden, dtype=dtype
        )
    return layers.DecoderBlock(
        num_heads=num_heads, intermediate_dim=2 * hidden, dtype=dtype
    )


@SETTINGS
@given(cases(), st.sampled_from(["attention", "encoder", "decoder"]))
def test_padding_never_matters_and_nothing_is_nan(case, kind):
    batch, seq, num_heads, hidden, dtype, lengths, seed = case
    layer = make(kind, num_heads, hidden, dtype)
    x, mask = inputs_and_mask(batch, seq, hidden, lengths, seed)
    out = numpy(layer(x, padding_mask=mask))
    assert not np.isnan(out).any()
    # Huge values in the padded positions change nothing at real ones.
    noisy = np.where(mask[..., None], x, 1e4 * np.sign(x + 0.5))
    noisy_out = numpy(layer(noisy, padding_mask=mask))
    assert not np.isnan(noisy_out).any()
    np.testing.assert_allclose(
        noisy_out[mask], out[mask], atol=tolerance(dtype), rtol=tolerance(dtype)
    )


@SETTINGS
@given(cases(), st.integers(0, 5))
def test_the_future_never_leaks_through_a_causal_mask(case, cut):
    batch, seq, num_heads, hidden, dtype, _, seed = case
    cut = min(cut, seq - 1)
    layer = make("decoder", num_heads, hidden, dtype)
    x, _ = inputs_and_mask(batch, seq, hidden, np.full(batch, seq), seed)
    changed = x.copy()
    changed[:, cut + 1 :] = np.random.default_rng(seed + 1).normal(
        size=changed[:, cut + 1 :].shape
    )
    out, changed_out = numpy(layer(x)), numpy(layer(changed))
    assert not np.isnan(out).any()
    np.testing.assert_allclose(
        changed_out[:, : cut + 1],
        out[:, : cut + 1],
        atol=tolerance(dtype),
        rtol=tolerance(dtype),
    )

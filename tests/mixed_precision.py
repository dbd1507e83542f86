"""How close mixed-precision outputs must be to float32 ones, from the
compute dtype's precision rather than a fixed absolute tolerance.

    u = 2**-8 (bfloat16: 8 significant bits) or 2**-11 (float16: 11)
    |mixed - float32| <= ROUNDINGS * u * max|float32|

A handful of roundings of the largest value: the small test models measure
within 1 u of the largest logit (0.27 to 0.94), so a fixed `atol=0.1`
(17% to 40% of their logits' scale) let almost any error through.
"""

import numpy as np

UNIT_ROUNDOFF = {"mixed_bfloat16": 2.0**-8, "mixed_float16": 2.0**-11}
ROUNDINGS = 8


def assert_close_to_float32(actual, expected, policy):
    """`actual` (under `policy`) within the bound above of `expected`, and
    the same argmax wherever float32's two best are further apart than
    twice the bound."""
    actual = np.asarray(actual, "float64")
    expected = np.asarray(expected, "float64")
    bound = ROUNDINGS * UNIT_ROUNDOFF[policy] * np.abs(expected).max()
    np.testing.assert_allclose(actual, expected, rtol=0, atol=bound)
    top2 = np.sort(expected, axis=-1)[..., -2:]
    clear = top2[..., 1] - top2[..., 0] > 2 * bound  # may be none at all
    agree = actual.argmax(-1) == expected.argmax(-1)
    assert agree[clear].all()

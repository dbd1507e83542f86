"""`check_token_id`, the one check of token-id arguments (padding, start, mask)."""

import numpy as np
import pytest

from keras_tfm.validation import check_token_id


def test_a_numpy_integer_id_is_stored_as_a_python_int():
    value = check_token_id("padding_id", np.int64(3), 5)
    assert value == 3 and type(value) is int


@pytest.mark.parametrize("bad", [5, -1, True, 1.0, "1", None])
def test_an_id_outside_the_vocabulary_or_not_an_integer_is_refused(bad):
    with pytest.raises(ValueError, match=r"`mask_token_id` must be an id in \[0, 5\)"):
        check_token_id("mask_token_id", bad, 5)


def test_none_passes_only_where_the_id_is_optional():
    assert check_token_id("start_token_id", None, 5, optional=True) is None
    with pytest.raises(ValueError, match="must be None or an id.*Received: x=5"):
        check_token_id("x", 5, 5, optional=True)

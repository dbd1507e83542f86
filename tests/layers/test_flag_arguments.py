"""Flag arguments (normalize_first, use_bias, use_rotary) take booleans only."""

import numpy as np
import pytest

from keras_tfm.layers import TransformerEncoderBlock
from keras_tfm.models import DecoderBackbone

SMALL = dict(num_heads=2, intermediate_dim=16)


@pytest.mark.parametrize(
    "bad", ["no", "False", 2, 0.0, None, [False], np.array([0, 1])]
)
def test_a_flag_that_is_not_a_boolean_is_refused(bad):
    # bool("no") and bool("False") are True: read as truth values they
    # would silently build the other model.
    with pytest.raises(ValueError, match=r"`normalize_first` must be True or False"):
        TransformerEncoderBlock(**SMALL, normalize_first=bad)


def test_numpy_booleans_and_0_or_1_are_stored_as_python_booleans():
    backbone = DecoderBackbone(
        vocabulary_size=20, num_layers=1, hidden_dim=8, max_sequence_length=8,
        use_bias=np.bool_(False), **SMALL,
    )  # fmt: skip
    assert backbone.use_bias is False
    assert backbone.get_config()["use_bias"] is False
    assert TransformerEncoderBlock(**SMALL, normalize_first=1).normalize_first is True

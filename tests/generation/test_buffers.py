"""The one buffer rule, its graph form and its beam-search variant."""

import numpy as np
import pytest
from keras import ops

from keras_tfm.generation import buffers


def smallest_power_of_two_at_least(n):
    """By counting up: the reference the bit tricks are checked against."""
    power = 1
    while power < n:
        power *= 2
    return power


@pytest.mark.parametrize(
    "smallest, maximum", [(64, 1024), (64, 100), (1, None), (4, None)]
)
def test_buffer_length_and_its_graph_form_agree_with_counting(smallest, maximum):
    for needed in range(1, 300):
        expected = max(smallest, smallest_power_of_two_at_least(needed))
        if maximum is not None:
            expected = min(expected, maximum)
        assert buffers.buffer_length(needed, maximum, smallest) == expected
        graph = buffers.buffer_length_graph(
            ops.convert_to_tensor(needed, "int32"), maximum, smallest
        )
        assert int(ops.convert_to_numpy(graph)) == expected


def test_rounded_and_beam_lengths_and_their_graph_forms():
    for needed in range(1, 70):
        expected = int(np.ceil(needed / 8) * 8)
        assert buffers.rounded_length(needed) == expected
        assert buffers.rounded_length(needed, 40) == min(expected, 40)
        tensor = ops.convert_to_tensor(needed, "int32")
        assert int(
            ops.convert_to_numpy(buffers.rounded_length_graph(tensor, 40))
        ) == min(expected, 40)
    # Beam search: a multiple of 8 for a causal LM, exact for seq2seq.
    assert buffers.beam_buffer_length(5, 6, 64, exact=False) == 16
    assert buffers.beam_buffer_length(1, 6, 64, exact=True) == 7
    four, six = (ops.convert_to_tensor(n, "int32") for n in (4, 6))
    graph = buffers.beam_buffer_length_graph(four, six, 64, exact=False)
    assert int(ops.convert_to_numpy(graph)) == 16

"""The sizes of generation's buffers: one rule, in Python and in the graph.

A compiled loop is compiled once per input shape, so every length that
reaches one is rounded up: nearby lengths share a program. The rule is a
power of two, at least `smallest`, at most `maximum` (`buffer_length`): the
built-in samplers' decoding buffer (at least 64 positions; the loop stops
at the position asked for, not at the end of the buffer) and the padded
tables of the settings (bad words, stop ids, stop strings). Its variant for
what is rounded finely is a multiple of 8 (`rounded_length`): beam search's
buffer (it ranks beams over the whole buffer, so it keeps the length it
always had: `beam_buffer_length`), a sequence-to-sequence model's sources,
scoring's batches, a chat session's cache and speculative decoding's
buffers (with their own multiples). Each has its graph form beside it, for
an exported signature whose lengths are tensors: the same numbers.

Example:
>>> buffer_length(70, maximum=1024), buffer_length(3), buffer_length(3, smallest=1)
(128, 64, 4)
>>> rounded_length(13), beam_buffer_length(5, 8, maximum=16, exact=False)
(16, 16)
"""

# Keras is imported by the graph forms only: the Python rules serve the LiteRT
# chat, which runs without it.

SMALLEST_BUFFER = 64
"""The shortest decoding buffer of the built-in samplers' loop."""


def buffer_length(needed, maximum=None, smallest=SMALLEST_BUFFER):
    """The power of two >= `needed` and >= `smallest`, at most `maximum`."""
    length = max(smallest, 1 << max(0, int(needed) - 1).bit_length())
    return length if maximum is None else min(length, maximum)


def buffer_length_graph(needed, maximum=None, smallest=SMALLEST_BUFFER):
    """`buffer_length` of a scalar int32 tensor `needed` (`maximum` an int).

    Example:
    >>> from keras import ops
    >>> [int(buffer_length_graph(ops.convert_to_tensor(n, "int32"), 100))
    ...  for n in (1, 64, 65, 99)]
    [64, 64, 100, 100]
    """
    from keras import ops

    powers = ops.convert_to_tensor([1 << i for i in range(31)], "int32")
    at_least = ops.min(ops.where(powers >= needed, powers, 1 << 30))
    length = ops.maximum(at_least, smallest)
    return length if maximum is None else ops.minimum(length, maximum)


def rounded_length(needed, maximum=None, multiple=8):
    """`needed` rounded up to a multiple of `multiple`, at most `maximum`."""
    length = -(-int(needed) // multiple) * multiple
    return length if maximum is None else min(length, maximum)


def rounded_length_graph(needed, maximum=None, multiple=8):
    """`rounded_length` of a scalar int32 tensor `needed`.

    Example:
    >>> from keras import ops
    >>> int(rounded_length_graph(ops.convert_to_tensor(13, "int32"), 100))
    16
    """
    from keras import ops

    length = (needed + multiple - 1) // multiple * multiple
    return length if maximum is None else ops.minimum(length, maximum)


def beam_buffer_length(longest, max_new_tokens, maximum, exact):
    """Beam search's buffer: the longest decoder prompt plus the new tokens,
    rounded up to a multiple of 8 (at most `maximum`), or `exact` (a
    sequence-to-sequence model: its start token and the new tokens).
    Beam search ranks its beams over the whole buffer, so a longer one could
    change the winner: this is the length it has always had."""
    if exact:
        return longest + max_new_tokens
    return rounded_length(longest + max_new_tokens, maximum)


def beam_buffer_length_graph(longest, max_new_tokens, maximum, exact):
    """`beam_buffer_length` of scalar int32 tensors."""
    if exact:
        return longest + max_new_tokens
    return rounded_length_graph(longest + max_new_tokens, maximum)

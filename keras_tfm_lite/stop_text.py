"""Stop strings on text: where an answer ends, and what of it may be shown yet.

Pure Python: the TensorFlow decoding loop (`keras_tfm.generation.stop_strings`)
and the LiteRT chat (`keras_tfm_lite.litert_chat`) cut their answers here.

Example:
>>> cut_at_stop_strings("Amen. And then", ["And", "."], start=0)
'Amen'
"""


def cut_at_stop_strings(text, stop_strings, start):
    """`text` cut before the first stop string found at or after `start`."""
    found = [text.find(s, start) for s in stop_strings]
    found = [i for i in found if i >= 0]
    return text[: min(found)] if found else text


def visible_text(text, stop_strings, start, final=False):
    """What of a streamed `text` may be shown: cut before the first stop
    string at or after `start`; before that is found (and unless `final`),
    without its longest ending that is the start of a stop string.

    Example:
    >>> visible_text("Amen. An", ["And"], start=0)
    'Amen. '
    >>> visible_text("Amen. An", ["And"], start=0, final=True)
    'Amen. An'
    """
    cut = cut_at_stop_strings(text, stop_strings, start)
    if final or len(cut) < len(text):
        return cut
    new = text[start:]
    held = max(
        (k for s in stop_strings for k in range(1, min(len(s), len(new) + 1))
         if new.endswith(s[:k])),
        default=0,
    )  # fmt: skip
    return text[: len(text) - held]

"""The text of an answer as it is generated: deltas, stop strings.

Detokenizing the whole answer at each token and sending what is new keeps
multi-byte characters whole (a token that ends half a character sends
nothing yet). A stop string ends the answer and is not returned; text that
could be the beginning of one is held back until it is decided.
"""


def as_text(value):
    """A tokenizer's `detokenize` output (str, bytes or a string tensor) as str."""
    if hasattr(value, "numpy"):
        value = value.numpy()
    if hasattr(value, "item"):
        value = value.item()
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


class TextStream:
    """Turns token ids into text deltas, ending at a stop string.

    Args:
        detokenize: ids (a list of ints) to text.
        stop: the stop strings (may be empty).

    Example:
    >>> from keras_tfm.serving.text_stream import TextStream
    >>> pieces = {1: "Hel", 2: "lo ", 3: "wor", 4: "ld"}
    >>> stream = TextStream(lambda ids: "".join(pieces[i] for i in ids), ["o w"])
    >>> stream.push(1), stream.push(2), stream.push(3)
    (('Hel', False), ('l', False), ('', True))
    >>> stream.text
    'Hell'
    """

    def __init__(self, detokenize, stop=()):
        self.detokenize = detokenize
        self.stop = [s for s in stop if s]
        self.ids = []
        self.text = ""  # what has been sent

    def push(self, token):
        """`(delta, stopped)` after one more token."""
        self.ids.append(int(token))
        text = as_text(self.detokenize(self.ids))
        if text.endswith("\ufffd"):  # half a character: wait for the rest
            return "", False
        return self._advance(text, final=False)

    def flush(self):
        """`(delta, stopped)` when the answer ends: what was held back."""
        return self._advance(as_text(self.detokenize(self.ids)), final=True)

    def _advance(self, text, final):
        sent = len(self.text)
        found = [
            i
            for i in (text.find(s, max(0, sent - len(s) + 1)) for s in self.stop)
            if i >= 0
        ]
        if found:
            return self._send(text[: min(found)]), True
        held = 0
        if not final:  # text that may begin a stop string waits
            held = max(
                (
                    k
                    for s in self.stop
                    for k in range(1, len(s))
                    if text.endswith(s[:k])
                ),
                default=0,
            )
        return self._send(text[: len(text) - held]), False

    def _send(self, text):
        if len(text) <= len(self.text):
            return ""
        delta, self.text = text[len(self.text) :], text
        return delta

"""Streamed text: what of an answer may be shown as its tokens come.

The one helper behind every streamed answer (`CausalLM.chat`, the chat
REPL, the server's `keras_tfm.serving.text_stream` and the LiteRT chat
`keras_tfm.lite.litert_chat`): the ids so far are detokenized whole at
each token and only what is new is shown, held back while

- the text ends with U+FFFD: a token ended inside a multi-byte UTF-8
  character, whose other bytes come with the next token;
- the text ends with the start of a stop string: shown once the next
  tokens make it something else, never shown if they complete it.

The answer ends before the first stop string of its new text. Pure Python
(no TensorFlow, no Keras): the LiteRT chat imports it before either.

Example:
>>> cut_at_stop_strings("Amen. And then", ["And", "."], start=0)
'Amen'
>>> pieces = {1: "Hel", 2: "lo ", 3: "wor", 4: "ld"}
>>> stream = TextStream(lambda ids: "".join(pieces[i] for i in ids), ["o w"])
>>> stream.push(1), stream.push(2), stream.push(3)
(('Hel', False), ('l', False), ('', True))
>>> stream.text
'Hell'
"""


def as_text(value):
    """A tokenizer's `detokenize` output (str, bytes or a string tensor) as str."""
    if hasattr(value, "numpy"):
        value = value.numpy()
    if hasattr(value, "item"):
        value = value.item()
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _strings(stop_strings):
    """`stop_strings` as a tuple of non-empty strings (one string: one stop)."""
    if isinstance(stop_strings, str):
        stop_strings = (stop_strings,)
    return tuple(s for s in stop_strings or () if s)


def find_stop_string(text, stop_strings, start):
    """Where the first stop string at or after `start` begins in `text`, or None."""
    found = [text.find(s, start) for s in _strings(stop_strings)]
    found = [i for i in found if i >= 0]
    return min(found) if found else None


def cut_at_stop_strings(text, stop_strings, start):
    """`text` cut before the first stop string found at or after `start`."""
    end = find_stop_string(text, stop_strings, start)
    return text if end is None else text[:end]


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
    stop_strings = _strings(stop_strings)
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


class TextStream:
    """Token ids in, text deltas out, ending at a stop string.

    Args:
        detokenize: ids (a list of ints) to text (str, bytes or a string
            tensor).
        stop_strings: strings that end the answer (not shown); one string
            is one stop string.
        prompt: ids before the streamed ones: detokenized with them (a
            tokenizer may join the two), never shown, never searched for a
            stop string.

    Attributes:
        text: what has been shown so far (the deltas joined).
        stopped: whether a stop string ended the text.

    Example:
    >>> stream = TextStream(lambda ids: bytes(ids).decode("utf-8", "replace"))
    >>> stream.push(0xC3), stream.push(0xA9), stream.flush()
    (('', False), ('é', False), ('', False))
    """

    def __init__(self, detokenize, stop_strings=(), prompt=()):
        self.detokenize = detokenize
        self.stop_strings = _strings(stop_strings)
        self.ids = [int(t) for t in prompt]
        self.start = len(as_text(detokenize(self.ids))) if self.ids else 0
        self.shown = ""  # the whole text shown, prompt included
        self.stopped = False

    @property
    def text(self):
        return self.shown[self.start :]

    def push(self, token):
        """`(delta, stopped)` after one more token (nothing after a stop)."""
        if self.stopped:
            return "", True
        self.ids.append(int(token))
        return self._advance(final=False)

    def flush(self):
        """`(delta, stopped)` when the answer ends: what was held back."""
        if self.stopped:
            return "", True
        return self._advance(final=True)

    def _advance(self, final):
        text = as_text(self.detokenize(self.ids))
        if not final and text.endswith("\ufffd"):  # half a character: wait
            return "", False
        end = find_stop_string(text, self.stop_strings, self.start)
        self.stopped = end is not None
        visible = visible_text(text, self.stop_strings, self.start, final)
        if not self.shown:
            self.shown = visible[: self.start]  # the prompt's text
        if len(visible) <= len(self.shown) or not visible.startswith(self.shown):
            return "", self.stopped  # nothing new (or earlier text changed)
        delta, self.shown = visible[len(self.shown) :], visible
        return delta, self.stopped


def text_pieces(detokenize, ids, stop_strings=(), stop_token_ids=()):
    """The new text per id of `ids`, as `TextStream` shows it.

    Ends at the first of `stop_token_ids` (not shown), at None (nothing
    new: the stream ended), or at a stop string; what was held back comes
    last.

    Example:
    >>> def detokenize(ids):  # one id a byte
    ...     return bytes(ids).decode("utf-8", "replace")
    >>> list(text_pieces(detokenize, iter([72, 105, 0, 33]), stop_token_ids=[0]))
    ['H', 'i']
    >>> list(text_pieces(detokenize, iter([72, 105, 33, 0]), ["i!"], [0]))
    ['H']
    """
    stops = {int(t) for t in stop_token_ids}
    stream = TextStream(detokenize, stop_strings)
    for token in ids:
        if token is None or int(token) in stops:
            break
        delta, stopped = stream.push(token)
        if delta:
            yield delta
        if stopped:
            return
    delta, _ = stream.flush()
    if delta:
        yield delta

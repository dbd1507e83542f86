"""The text of an answer as it is generated: deltas, stop strings.

The server streams through the one streamed-text helper of the package,
`keras_tfm.lite.stop_text.TextStream` (UTF-8 and stop-string hold-back), as
`chat`, the chat REPL and the LiteRT chat do: each token's delta is what
the whole answer's text adds to what was sent, a multi-byte character is
sent whole, and a stop string ends the answer unseen.

Example:
>>> from keras_tfm.serving.text_stream import TextStream
>>> pieces = {1: "Hel", 2: "lo ", 3: "wor", 4: "ld"}
>>> stream = TextStream(lambda ids: "".join(pieces[i] for i in ids), ["o w"])
>>> stream.push(1), stream.push(2), stream.push(3)
(('Hel', False), ('l', False), ('', True))
"""

from keras_tfm.lite.stop_text import TextStream, as_text

__all__ = ["TextStream", "as_text"]

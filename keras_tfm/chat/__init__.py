"""Chat with a model: one conversation, kept or not, in Python or a terminal.

- `chat(model, messages)`: one answer from the whole conversation through
  `model.generate` (what `CausalLM.chat` runs); every setting of `generate`
  applies, and it returns what `generate` returns, text for ids.
- `ChatSession(model)`: a conversation whose key/value cache outlives each
  turn: a turn runs only what follows the cached prefix, and streams.
- `converse(model)`: the interactive REPL of `keras-tfm chat` without a
  message, on a `ChatSession`.
- `keras_tfm.chat.entry_writer`: after `keras-tfm chat "..."`, writes the
  LiteRT entry that lets the next one answer without TensorFlow
  (`python -m keras_tfm.chat.entry_writer MODEL WEIGHTS`; not imported here:
  it needs the zoo and export).

`keras_tfm.chat.conversation` holds what they share: the template, the
stop ids (the end of the turn and the caller's), the answer's text. The
streamed text (UTF-8 and stop-string hold-back) is
`keras_tfm.lite.stop_text.TextStream`, shared with the server and the
LiteRT chat.
"""

from keras_tfm.chat.repl import converse
from keras_tfm.chat.session import ChatSession
from keras_tfm.chat.stateless import chat

__all__ = ["ChatSession", "chat", "converse"]

"""An interactive conversation with a chat model, in one process.

`keras-tfm chat` without a message runs `converse`: the model is loaded
(and its decoding compiled) once, then each line the user types is answered,
streamed as it is generated, by a `ChatSession`: the conversation so far is
the prompt, but only what the cache does not hold yet (the new message and
the template's markup around it) goes through the model. The first prompt
goes through the compiled decoding step one token at a time (no prefill to
compile before the first answer); the chunked prefill that runs the later
turns' new tokens in one pass is compiled in a thread while the user reads
and types (`ChatSession.warm`). An empty line is
skipped, `/reset` forgets the conversation, and end of input (Ctrl-D) or
Ctrl-C ends it. When the conversation outgrows the context window, its
oldest turns are dropped (`fitting_history`) and the prompt runs again from
the first changed token.
"""

import sys
import threading

from keras_tfm.chat.conversation import fitting_history
from keras_tfm.chat.session import ChatSession

PROMPT = "> "
RESET = "/reset"


def converse(model, lines=None, out=None, max_new_tokens=256, session=None, **settings):
    """Answers each line of `lines` in one conversation; returns the history.

    Args:
        model: a `CausalLM` whose tokenizer has a chat template.
        lines: an iterator of the user's lines (default: standard input, with
            a "> " prompt when it is a terminal).
        out: where answers are written (default: standard output).
        max_new_tokens: the longest answer, in tokens.
        session: what answers (`stream(messages, max_new_tokens, **settings)`);
            default a new `ChatSession(model)`.
        **settings: the decoding settings (sampler, seed, stop_strings, ...),
            as `ChatSession.stream` takes them.

    Returns:
        The conversation: a list of {"role", "content"} messages.

    Example:
    >>> class Echo:  # a stand-in session that answers with the turn count
    ...     def stream(self, messages, max_new_tokens):
    ...         return iter([f"turn {len(messages) // 2 + 1}"])
    >>> import io
    >>> history = converse(None, iter(["hi", "", "again"]), io.StringIO(),
    ...                    session=Echo())
    >>> [m["content"] for m in history]
    ['hi', 'turn 1', 'again', 'turn 2']
    """
    out = sys.stdout if out is None else out
    prompt = lines is None and sys.stdin.isatty()
    lines = _stdin_lines(prompt) if lines is None else lines
    session = ChatSession(model) if session is None else session
    tokenizer = getattr(model, "tokenizer", None)
    limit = getattr(getattr(model, "backbone", None), "max_sequence_length", None)
    history = []
    warming = None
    try:
        for line in lines:
            message = line.strip()
            if not message:
                continue
            if message == RESET:
                history = []
                continue
            if warming is not None:
                warming.join()
            history.append({"role": "user", "content": message})
            if limit is not None and tokenizer is not None:
                history = fitting_history(history, tokenizer, limit - max_new_tokens)
            pieces = []
            for piece in session.stream(history, max_new_tokens, **settings):
                pieces.append(piece)
                out.write(piece)
                out.flush()
            out.write("\n")
            history.append({"role": "assistant", "content": "".join(pieces).strip()})
            warming = _warm(session)
    except KeyboardInterrupt:
        out.write("\n")
    if warming is not None:
        warming.join()
    return history


def _warm(session):
    """Compiles the session's chunked prefill in a thread while the user reads
    and types (`ChatSession.warm`); the thread, or None without it."""
    if not callable(getattr(session, "warm", None)):
        return None
    thread = threading.Thread(target=session.warm, name="keras-tfm-warm", daemon=True)
    thread.start()
    return thread


def _stdin_lines(prompt):
    while True:
        try:
            yield input(PROMPT) if prompt else _read_line()
        except EOFError:
            if prompt:
                print()
            return


def _read_line():
    line = sys.stdin.readline()
    if not line:
        raise EOFError
    return line

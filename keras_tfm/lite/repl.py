"""The interactive conversation loop of `keras-tfm chat` without a message.

`converse_with(session)` reads the user's lines, answers each through
`session.stream(history, max_new_tokens, **settings)` as it is generated,
and keeps the history; it imports neither Keras nor TensorFlow, so the same
loop runs on a TensorFlow `ChatSession` (`keras_tfm.chat.converse`) and on a
cached LiteRT copy (`keras_tfm.lite.chat_command`). An empty
line is skipped, `/reset` forgets the conversation, and end of input
(Ctrl-D) or Ctrl-C ends it. Between turns, a session with a `warm()` method
runs it in a thread while the user reads and types.
"""

import sys
import threading

PROMPT = "> "
RESET = "/reset"


def converse_with(session, lines=None, out=None, max_new_tokens=256, fit=None,
                  **settings):  # fmt: skip
    """Answers each line of `lines` in one conversation; returns the history.

    Args:
        session: what answers: `stream(messages, max_new_tokens, **settings)`
            yields the answer's text in pieces.
        lines: an iterator of the user's lines (default: standard input, with
            a "> " prompt when it is a terminal).
        out: where answers are written (default: standard output).
        max_new_tokens: the longest answer, in tokens.
        fit: `history -> history` run before each answer (e.g. dropping the
            oldest turns that no longer fit the context); default none.
        **settings: the decoding settings, passed to `session.stream`.

    Returns:
        The conversation: a list of {"role", "content"} messages.

    Example:
    >>> class Echo:  # a stand-in session that answers with the turn count
    ...     def stream(self, messages, max_new_tokens):
    ...         return iter([f"turn {len(messages) // 2 + 1}"])
    >>> import io
    >>> history = converse_with(Echo(), iter(["hi", "", "again"]), io.StringIO())
    >>> [m["content"] for m in history]
    ['hi', 'turn 1', 'again', 'turn 2']
    """
    out = sys.stdout if out is None else out
    prompt = lines is None and sys.stdin.isatty()
    lines = _stdin_lines(prompt) if lines is None else lines
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
            if fit is not None:
                history = fit(history)
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


def fitting_history(history, tokenizer, budget):
    """The latest turns of `history` whose chat prompt fits in `budget` tokens.

    The oldest user/assistant pairs are dropped first; the last message is
    always kept.

    Example:
    >>> class Words:  # one token per word
    ...     def apply_chat_template(self, messages):
    ...         return " ".join(m["content"] for m in messages)
    ...     def __call__(self, text):
    ...         return text.split()
    >>> turns = [{"role": "user", "content": "a b"},
    ...          {"role": "assistant", "content": "c"},
    ...          {"role": "user", "content": "d e f"}]
    >>> [m["content"] for m in fitting_history(turns, Words(), 4)]
    ['d e f']
    """
    kept = list(history)
    while len(kept) > 1:
        if len(tokenizer(tokenizer.apply_chat_template(kept))) <= budget:
            break
        kept = kept[2:] if len(kept) > 2 else kept[-1:]
    return kept


def _warm(session):
    """Runs `session.warm()` (e.g. compiling the next turn's prefill) in a
    thread while the user reads and types; the thread, or None without it."""
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

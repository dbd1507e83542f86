"""An interactive conversation with a chat model, in one process.

`keras-tfm chat` without a message runs `converse`: the model is loaded
(and its decoding compiled) once, then each line the user types is answered,
streamed as it is generated, with the whole conversation so far as the
prompt. An empty line is skipped, `/reset` forgets the conversation, and
end of input (Ctrl-D) or Ctrl-C ends it.

A first short prompt goes through the compiled decoding step alone
(`CausalLM.prompt_through_step`), so the answer comes without tracing and
loading the compiled prefill; the later, longer prompts need it, and it is
traced and loaded in the background while the user reads and types
(`warm_next_turn`), not when the next line is sent.
"""

import sys
import threading

PROMPT = "> "
RESET = "/reset"


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


def converse(model, lines=None, out=None, max_new_tokens=256, **generate_kwargs):
    """Answers each line of `lines` in one conversation; returns the history.

    Args:
        model: a `CausalLM` whose tokenizer has a chat template.
        lines: an iterator of the user's lines (default: standard input, with
            a "> " prompt when it is a terminal).
        out: where answers are written (default: standard output).
        max_new_tokens: the longest answer, in tokens.
        **generate_kwargs: passed to `model.chat` (sampler, seed, ...).

    Returns:
        The conversation: a list of {"role", "content"} messages.

    Example:
    >>> class Echo:  # a stand-in model that answers with the turn count
    ...     def chat(self, messages, max_new_tokens, stream):
    ...         return iter([f"turn {len(messages) // 2 + 1}"])
    >>> import io
    >>> history = converse(Echo(), iter(["hi", "", "again"]), io.StringIO())
    >>> [m["content"] for m in history]
    ['hi', 'turn 1', 'again', 'turn 2']
    """
    out = sys.stdout if out is None else out
    prompt = lines is None and sys.stdin.isatty()
    lines = _stdin_lines(prompt) if lines is None else lines
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
            for piece in model.chat(history, max_new_tokens=max_new_tokens,
                                    stream=True, **generate_kwargs):  # fmt: skip
                pieces.append(piece)
                out.write(piece)
                out.flush()
            out.write("\n")
            history.append({"role": "assistant", "content": "".join(pieces)})
            warming = warm_next_turn(model, history, max_new_tokens, generate_kwargs)
    except KeyboardInterrupt:
        out.write("\n")
    if warming is not None:
        warming.join()
    return history


def warm_next_turn(model, history, max_new_tokens, generate_kwargs):
    """Starts tracing (and loading) in a thread what the next turn needs.

    The next prompt is `history` plus a user message: past the model's
    `prompt_through_step` tokens it goes through the compiled prefill,
    which this thread calls once on a stand-in of that prompt, with the
    same settings and decoding buffer (the first new token is decoded and
    dropped). Returns the thread (to join before the next turn), or None
    for a model without the compiled prefill.
    """
    limit = getattr(model, "prompt_through_step", None)
    tokenizer = getattr(model, "tokenizer", None)
    if limit is None or tokenizer is None:
        return None
    upcoming = [*history, {"role": "user", "content": "?"}]
    prompt = [int(i) for i in tokenizer(tokenizer.apply_chat_template(upcoming))]
    if len(prompt) <= limit:
        return None

    def warm():
        steps = model.generate(
            prompt, max_new_tokens, stream=True,
            stop_token_ids=(tokenizer.end_token_id,), **generate_kwargs,
        )  # fmt: skip
        next(iter(steps), None)
        steps.close()

    thread = threading.Thread(target=warm, name="keras-tfm-warm", daemon=True)
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

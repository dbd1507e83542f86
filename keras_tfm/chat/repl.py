"""An interactive conversation with a chat model, in one process.

`keras-tfm chat` without a message runs `converse` (when no LiteRT copy can
answer it: `keras_tfm.lite.chat_command`): the model is loaded (and its
decoding compiled) once, then each line the user types is answered,
streamed as it is generated, by a `ChatSession`: the conversation so far is
the prompt, but only what the cache does not hold yet (the new message and
the template's markup around it) goes through the model. The first prompt
goes through the compiled decoding step one token at a time (no prefill to
compile before the first answer); the chunked prefill that runs the later
turns' new tokens in one pass is compiled in a thread while the user reads
and types (`ChatSession.warm`). The loop itself (empty lines, `/reset`,
Ctrl-D) is `keras_tfm.lite.repl.converse_with`. When the conversation
outgrows the context window, its oldest turns are dropped
(`fitting_history`) and the prompt runs again from the first changed token.
"""

from keras_tfm.chat.session import ChatSession
from keras_tfm.lite.repl import converse_with, fitting_history


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
    """
    session = ChatSession(model) if session is None else session
    fit = history_fit(model, max_new_tokens)
    return converse_with(session, lines, out, max_new_tokens, fit, **settings)


def history_fit(model, max_new_tokens):
    """`history -> history` keeping the latest turns whose prompt leaves
    `max_new_tokens` positions of `model`'s context (None if it has none)."""
    tokenizer = getattr(model, "tokenizer", None)
    limit = getattr(getattr(model, "backbone", None), "max_sequence_length", None)
    if limit is None or tokenizer is None:
        return None
    return lambda history: fitting_history(history, tokenizer, limit - max_new_tokens)

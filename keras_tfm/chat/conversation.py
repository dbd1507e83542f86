"""A conversation as a model reads it: messages, the chat template, stops.

What every chat shares (`chat`, `ChatSession`, the REPL): the prompt is the
conversation formatted by the tokenizer's chat template, with the opening
of the assistant's turn; the answer ends at the end-of-turn token (the
tokenizer's end token) or at any stop id the caller adds; its text is the
new tokens' without the template's markup, cut before a stop string.
"""

from keras_tfm.lite.stop_text import as_text, cut_at_stop_strings


def check_chat_model(model, who):
    """Raises unless `model`'s tokenizer has a chat template; returns it."""
    tokenizer = getattr(model, "tokenizer", None)
    if not callable(getattr(tokenizer, "apply_chat_template", None)):
        raise ValueError(
            f"{who} needs a model whose tokenizer has a chat template (e.g. "
            "the preset smollm2_135m_instruct). Received: a model with "
            f"tokenizer={type(tokenizer).__name__}"
        )
    return tokenizer


def prompt_ids(tokenizer, messages):
    """The token ids of `messages` (a string: one user message) in the chat
    template, ending with the opening of the assistant's turn."""
    return [int(i) for i in tokenizer(tokenizer.apply_chat_template(messages))]


def chat_stop_ids(tokenizer, stop_token_ids=None):
    """The ids that end an answer: the end of the turn, then the given ones.

    Example:
    >>> class Tokenizer:
    ...     end_token_id = 2
    >>> chat_stop_ids(Tokenizer(), [7, 2])
    (2, 7)
    >>> chat_stop_ids(Tokenizer())
    (2,)
    """
    given = () if stop_token_ids is None else stop_token_ids
    if isinstance(given, int):
        given = (given,)
    return tuple(dict.fromkeys((int(tokenizer.end_token_id), *given)))


def answer_ids(ids, stop_ids):
    """`ids` before the first of `stop_ids`.

    Example:
    >>> answer_ids([5, 6, 2, 7], (2,))
    [5, 6]
    """
    ids = [int(i) for i in ids]
    ends = [ids.index(s) for s in stop_ids if s in ids]
    return ids[: min(ends)] if ends else ids


def answer_text(tokenizer, ids, stop_strings=()):
    """The answer's text: `ids` detokenized, cut before a stop string,
    without the spaces around it."""
    text = as_text(tokenizer.detokenize(ids))
    return cut_at_stop_strings(text, stop_strings or (), 0).strip()


def detokenize_answer(tokenizer):
    """`ids -> text` of a streamed answer: its leading spaces dropped (the
    whole answer is stripped)."""
    return lambda ids: as_text(tokenizer.detokenize(ids)).lstrip()

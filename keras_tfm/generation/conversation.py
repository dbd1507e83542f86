"""Chatting with an instruct model: the chat template, then generation."""

from keras_tfm.validation import check_positive_int


def chat(model, messages, max_new_tokens=256, stream=False, **generate_kwargs):
    """The model's answer to a message or a conversation, as a string.

    The conversation is formatted by the tokenizer's chat template (with the
    opening of the assistant's turn), generated from until the tokenizer's
    end token (the end of the turn), and only the new tokens are decoded.

    Args:
        model: a `CausalLM` whose tokenizer has `apply_chat_template`, e.g.
            `keras_tfm.zoo.from_preset("smollm2_135m_instruct")`.
        messages: a string (one user message) or a list of
            {"role": "system" | "user" | "assistant", "content": str} dicts.
        max_new_tokens: the longest answer, in tokens.
        stream: return a generator of the answer's text pieces as they are
            generated (joined, they are the answer) instead of the answer.
        **generate_kwargs: passed to `model.generate` (sampler, top_p, seed...).

    Returns:
        The answer, without the template's markup (a generator of its pieces
        with `stream=True`).

    Example:
    >>> model = keras_tfm.zoo.from_preset("smollm2_135m_instruct")
    >>> model.chat("What is the capital of France?", max_new_tokens=16)
    'The capital of France is Paris.'
    """
    tokenizer = getattr(model, "tokenizer", None)
    if not callable(getattr(tokenizer, "apply_chat_template", None)):
        raise ValueError(
            "`chat` needs a model whose tokenizer has a chat template (e.g. the "
            "preset smollm2_135m_instruct). Received: a model with tokenizer="
            f"{type(tokenizer).__name__}"
        )
    check_positive_int("max_new_tokens", max_new_tokens)
    end_id = tokenizer.end_token_id
    prompt = [int(i) for i in tokenizer(tokenizer.apply_chat_template(messages))]
    if stream:
        steps = model.generate(
            prompt, max_new_tokens, stop_token_ids=(end_id,), stream=True,
            **generate_kwargs,
        )  # fmt: skip
        return _answer_pieces(tokenizer, steps, end_id)
    output = model.generate(
        prompt, max_new_tokens, stop_token_ids=(end_id,), **generate_kwargs
    )
    answer = [int(i) for i in output[len(prompt) :]]
    if end_id in answer:
        answer = answer[: answer.index(end_id)]
    return tokenizer.detokenize(answer).strip()


def _answer_pieces(tokenizer, steps, end_id):
    """New text per generated id, held back while it ends mid-character."""
    answer, shown = [], ""
    for token in steps:
        if token is None or int(token) == end_id:
            break
        answer.append(int(token))
        text = tokenizer.detokenize(answer).lstrip()
        if text.endswith("\ufffd"):  # half of a multi-byte UTF-8 character
            continue
        yield text[len(shown) :]
        shown = text

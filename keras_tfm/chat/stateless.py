"""`chat(model, messages)`: one answer from the whole conversation.

What `CausalLM.chat` runs: the conversation goes through the chat template
and `model.generate` (every setting of `generate` applies, and is checked
there), and the answer is the new tokens' text. Nothing is kept between
calls; `keras_tfm.chat.ChatSession` keeps the cache of a conversation.
"""

from keras_tfm.chat.conversation import (
    answer_ids,
    answer_text,
    chat_stop_ids,
    check_chat_model,
    detokenize_answer,
    prompt_ids,
)
from keras_tfm.generation.outputs import warn_if_cut
from keras_tfm.lite.stop_text import text_pieces
from keras_tfm.validation import check_positive_int


def chat(model, messages, max_new_tokens=256, stream=False, **generate_kwargs):
    """The model's answer to a message or a conversation.

    Args:
        model: a `CausalLM` whose tokenizer has a chat template.
        messages: a string (one user message) or a list of
            {"role": "system" | "user" | "assistant", "content": str}.
        max_new_tokens: the longest answer, in tokens.
        stream: return a generator of the answer's text pieces as they are
            generated (joined, they are the answer).
        **generate_kwargs: passed to `model.generate` (sampler, top_p, seed,
            stop_strings, return_scores, ...). `stop_token_ids` end the
            answer as the end of the turn does (both end it).

    Returns:
        What `generate` returns, with the answer's text for its ids: the
        text, or with `return_scores=True` `(text, scores)` (and `top`
        with `top_logprobs`), `scores` the log-probability of each new
        token as `generate` gives them (the end-of-turn token included);
        with `stream=True`, a generator of text pieces.
    """
    tokenizer = check_chat_model(model, "`chat`")
    check_positive_int("max_new_tokens", max_new_tokens)
    prompt = prompt_ids(tokenizer, messages)
    stops = chat_stop_ids(tokenizer, generate_kwargs.pop("stop_token_ids", None))
    stop_strings = generate_kwargs.get("stop_strings") or ()
    output = model.generate(
        prompt, max_new_tokens, stream=stream, stop_token_ids=stops, **generate_kwargs
    )
    if stream:
        return text_pieces(detokenize_answer(tokenizer), output, stop_strings, stops)
    rest = ()
    if generate_kwargs.get("return_scores"):
        output, *rest = output
    if (generate_kwargs.get("response_format") or {}).get("type", "text") != "text":
        warn_if_cut([output[len(prompt) :]], stops, max_new_tokens)
    ids = answer_ids(output[len(prompt) :], stops)
    text = answer_text(tokenizer, ids, stop_strings)
    return (text, *rest) if rest else text

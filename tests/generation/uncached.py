"""Greedy decoding by full forward passes, no cache: the reference that
cached, reused and speculative decoding must equal."""

import numpy as np


def greedy_uncached(model, ids, max_new_tokens, stop_token_ids=()):
    """`ids` followed by up to `max_new_tokens` argmax tokens (the stop id kept)."""
    ids = [int(i) for i in ids]
    for _ in range(max_new_tokens):
        logits = np.asarray(model(np.array([ids]))[0, -1], "float64")
        ids.append(int(np.argmax(logits)))
        if ids[-1] in stop_token_ids:
            break
    return ids


def chat_uncached(model, messages, max_new_tokens):
    """What `model.chat(messages)` answers, greedy, from uncached passes."""
    tokenizer = model.tokenizer
    prompt = [int(i) for i in tokenizer(tokenizer.apply_chat_template(messages))]
    end = tokenizer.end_token_id
    answer = greedy_uncached(model, prompt, max_new_tokens, (end,))[len(prompt) :]
    return tokenizer.detokenize([t for t in answer if t != end]).strip()

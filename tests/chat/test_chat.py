"""`chat` returns what `generate` returns (text for ids), and ends the
answer on the end of the turn and on the stop ids given, both."""

import numpy as np
import pytest

from tests.generation.uncached import greedy_uncached


def _prompt(llm, messages):
    tokenizer = llm.tokenizer
    return [int(i) for i in tokenizer(tokenizer.apply_chat_template(messages))]


def _log_softmax64(logits):
    logits = np.asarray(logits, "float64")
    return logits - np.log(np.exp(logits - logits.max()).sum()) - logits.max()


def test_return_scores_gives_the_text_and_generates_scores(llm):
    messages = [{"role": "user", "content": "hello world"}]
    text, scores = llm.chat(messages, max_new_tokens=6, return_scores=True)
    assert text == llm.chat(messages, max_new_tokens=6)
    prompt = _prompt(llm, messages)
    end = llm.tokenizer.end_token_id
    ids, expected = llm.generate(prompt, 6, stop_token_ids=[end], return_scores=True)
    assert scores == expected
    # And each score is the model's log-probability of its token (a float64
    # reference from full passes, no cache).
    full = greedy_uncached(llm, prompt, 6, (end,))
    assert ids == full and len(scores) == len(full) - len(prompt)
    for i, score in enumerate(scores):
        logits = llm(np.array([full[: len(prompt) + i]]))[0, -1]
        reference = _log_softmax64(logits)[full[len(prompt) + i]]
        np.testing.assert_allclose(score, reference, atol=1e-4)
    text, scores, top = llm.chat(
        messages, max_new_tokens=6, return_scores=True, top_logprobs=2
    )
    assert len(top) == len(scores) and all(len(t) == 2 for t in top)


def test_stop_token_ids_end_the_answer_with_the_end_of_the_turn(llm, monkeypatch):
    tokenizer = llm.tokenizer
    prompt = _prompt(llm, "hello")
    ids = greedy_uncached(llm, prompt, 12, (tokenizer.end_token_id,))[len(prompt) :]
    firsts = [i for i in range(len(ids)) if ids[i] not in ids[:i]]
    assert len(firsts) >= 3, ids  # where three ids first come
    j, k = firsts[1:3]
    # A given id ends the answer (it raised a TypeError once).
    answer = llm.chat("hello", max_new_tokens=12, stop_token_ids=[ids[k]])
    assert answer == tokenizer.detokenize(ids[:k]).strip()
    streamed = llm.chat("hello", 12, stream=True, stop_token_ids=[ids[k]])
    assert "".join(streamed).strip() == answer
    # The end of the turn still ends it, before the given id.
    monkeypatch.setattr(tokenizer, "end_token_id", ids[j])
    answer = llm.chat("hello", max_new_tokens=12, stop_token_ids=[ids[k]])
    assert answer == tokenizer.detokenize(ids[:j]).strip()
    assert llm.chat("hello", max_new_tokens=12, stop_token_ids=ids[k]) == answer


def test_settings_are_checked_as_generate_checks_them(llm):
    with pytest.raises(ValueError, match="min_p"):
        llm.chat("hello", max_new_tokens=2, min_p=0.3)  # greedy reads no min_p
    with pytest.raises(ValueError, match="return_scores"):
        llm.chat("hello", max_new_tokens=2, return_scores=True, stream=True)

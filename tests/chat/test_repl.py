"""The chat REPL: a later turn runs only what the cache does not hold, and
answers as the stateless `chat` does with the whole history."""

import doctest
import io

from keras_tfm.chat import ChatSession, conversation, repl, session, stateless
from keras_tfm.chat.repl import converse


def test_a_second_turn_does_not_run_the_first_again(llm, monkeypatch):
    indices = []  # the position of each token that goes through the step
    compiled = ChatSession._compiled

    def counting(self, name, function):
        function = compiled(self, name, function)
        if name != "step":
            return function

        def step(tokens, caches, index, mask, settings):
            indices[-1].append(int(index))
            return function(tokens, caches, index, mask, settings)

        return step

    monkeypatch.setattr(ChatSession, "_compiled", counting)
    chat = ChatSession(llm, jit_compile=False)

    class Turns(ChatSession):  # marks where each turn starts
        def stream(self, messages, max_new_tokens, **settings):
            indices.append([])
            return chat.stream(messages, max_new_tokens, **settings)

    out = io.StringIO()
    lines = iter(["hello world", "or hello"])
    history = converse(llm, lines, out, max_new_tokens=5, session=Turns(llm))
    # Each answer is the stateless chat's greedy answer to the history so far.
    assert history[1]["content"] == llm.chat(history[:1], max_new_tokens=5)
    assert history[3]["content"] == llm.chat(history[:3], max_new_tokens=5)
    answers = [history[1]["content"], history[3]["content"]]
    assert out.getvalue().split("\n")[:2] == answers
    tokenizer = llm.tokenizer
    first = len(tokenizer(tokenizer.apply_chat_template(history[:1])))
    second = len(tokenizer(tokenizer.apply_chat_template(history[:3])))
    # The first turn runs its prompt from the start; the second turn's
    # tokens are all past the first prompt (the step at position i writes
    # the keys of position i - 1): none of the first turn runs again.
    assert indices[0][0] == 1 and min(indices[1]) > first
    assert len(indices[1]) < second


def test_reset_forgets_the_conversation(llm):
    out = io.StringIO()
    lines = iter(["hello", "/reset", "world"])
    history = converse(llm, lines, out, max_new_tokens=3,
                       session=ChatSession(llm, jit_compile=False))  # fmt: skip
    assert [m["content"] for m in history][0] == "world"
    assert history[1]["content"] == llm.chat("world", max_new_tokens=3)


def test_docstring_examples():
    for module in (conversation, repl, session, stateless):
        result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
        assert result.failed == 0, module.__name__

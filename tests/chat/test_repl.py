"""The chat REPL: a later turn runs only what the cache does not hold, and
answers as the stateless `chat` does with the whole history."""

import doctest
import io

from keras_tfm.chat import ChatSession, conversation, repl, session, stateless
from keras_tfm.chat.repl import converse


def test_a_second_turn_does_not_run_the_first_again(llm, monkeypatch):
    written = []  # per turn, the cache positions the model computes
    compiled = ChatSession._compiled

    def counting(self, name, function):
        function = compiled(self, name, function)

        def call(*args):
            if name == "step":  # (context, tokens, caches, index, ...): the
                written[-1].append(int(args[3]) - 1)  # keys of `index - 1`
            else:  # (tokens, caches, start, stop): `start ... stop - 1`
                written[-1].extend(range(int(args[2]), int(args[3])))
            return function(*args)

        return call

    monkeypatch.setattr(ChatSession, "_compiled", counting)

    def lines():
        for line in ["hello world", "or hello", "world"]:
            written.append([])
            yield line

    out = io.StringIO()
    history = converse(llm, lines(), out, max_new_tokens=5,
                       session=ChatSession(llm, jit_compile=False))  # fmt: skip
    # Each answer is the stateless chat's greedy answer to the history so far.
    answers = [history[i]["content"] for i in (1, 3, 5)]
    for i, answer in zip((1, 3, 5), answers, strict=True):
        assert answer == llm.chat(history[:i], max_new_tokens=5)
    assert out.getvalue().split("\n")[:3] == answers
    tokenizer = llm.tokenizer
    lengths = [
        len(tokenizer(tokenizer.apply_chat_template(history[:i]))) for i in (1, 3, 5)
    ]
    # The first turn runs its prompt from the start; a later turn runs only
    # positions past the previous prompt: none of the earlier turns again
    # (its new prompt tokens through the chunked prefill that was compiled
    # while the "user" typed, then one step per new token).
    assert written[0][0] == 0
    for turn in (1, 2):
        assert min(written[turn]) >= lengths[turn - 1]
        assert len(written[turn]) < lengths[turn]


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

"""ChatSession: a later turn prefills only what follows the cached prefix,
and answers exactly as a fresh `chat` does."""

import pytest

from keras_tfm.chat import ChatSession
from keras_tfm.chat import session as chat_session
from keras_tfm.chat.session import common_prefix_length
from keras_tfm.generation import set_kv_cache_dtype
from tests.builders import causal_lm
from tests.generation.uncached import chat_uncached, greedy_uncached


def test_common_prefix_length_by_hand():
    assert common_prefix_length([], [1]) == 0
    assert common_prefix_length([1, 2], [1, 2]) == 2
    assert common_prefix_length([1, 2, 3], [1, 2]) == 2
    assert common_prefix_length([4, 2], [1, 2]) == 0


def test_turns_equal_fresh_chats_and_reuse_the_prefix(llm):
    session = ChatSession(llm, jit_compile=False)
    messages = [{"role": "user", "content": "hello world"}]
    previous_prompt_length = 0
    for turn, text in enumerate(["hello", "world hello", "or"]):
        if turn:
            messages.append({"role": "user", "content": text})
        answer = session.chat(messages, max_new_tokens=12)
        assert answer == chat_uncached(llm, messages, 12)
        prompt = llm.tokenizer(llm.tokenizer.apply_chat_template(messages))
        if turn == 0:
            assert session.reused_length == 0
        else:
            # Only the new message and its markup are prefilled: at least the
            # previous prompt's tokens come from the cache.
            assert session.reused_length >= previous_prompt_length
            assert session.prefilled_length == len(prompt) - session.reused_length
        previous_prompt_length = len(prompt)
        messages.append({"role": "assistant", "content": answer})


def test_an_edited_history_keeps_the_common_prefix_only(llm):
    session = ChatSession(llm, jit_compile=False)
    first = [
        {"role": "user", "content": "hello world hello world"},
        {"role": "assistant", "content": "world"},
        {"role": "user", "content": "hello"},
    ]
    session.chat(first, max_new_tokens=6)
    edited = [dict(first[0], content="hello or"), *first[1:]]
    answer = session.chat(edited, max_new_tokens=6)
    assert answer == chat_uncached(llm, edited, 6)
    tokenizer = llm.tokenizer
    old = [int(i) for i in tokenizer(tokenizer.apply_chat_template(first))]
    new = [int(i) for i in tokenizer(tokenizer.apply_chat_template(edited))]
    expected = next(i for i, (a, b) in enumerate(zip(old, new, strict=False)) if a != b)
    assert session.reused_length == expected
    # The same conversation again reuses all but its last token.
    session.chat(edited, max_new_tokens=6)
    assert session.reused_length == len(new) - 1


def test_a_turn_traces_once_per_cache_length(llm, monkeypatch):
    # The cache grows in steps of 64 positions (256 for real models): a
    # growing conversation traces (and XLA compiles) once per length, not
    # once per turn.
    monkeypatch.setattr(chat_session, "CACHE_BUCKET", 64)
    llm.compiled_loops.invalidate()
    session = ChatSession(llm, jit_compile=False)
    lengths = []
    for message in ["hello", "or", "world hello", "hello world " * 6, "or"]:
        session.send(message, max_new_tokens=4)
        lengths.append(int(session._caches[0].shape[2]))
    step = llm.compiled_loops.get(("chat session", "step", False), None)
    assert len(set(lengths)) < len(lengths)  # some turns share a length
    assert all(length % 64 == 0 for length in lengths)
    assert step.experimental_get_tracing_count() == len(set(lengths))


def test_send_keeps_the_conversation(llm):
    session = ChatSession(llm, jit_compile=False)
    answer = session.send("hello", max_new_tokens=4)
    assert session.messages == [
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": answer},
    ]
    session.reset()
    assert session.messages == [] and session.cached_length == 0


def test_an_int8_cache_is_kept_and_grown_between_turns(llm):
    set_kv_cache_dtype(llm, "int8")
    try:
        session = ChatSession(llm, jit_compile=False)
        session.chat("hello", max_new_tokens=4)
        length = session._caches[0].values.shape[2]
        # A turn past the cache's length grows it (zero-padded, int8 kept).
        long = [{"role": "user", "content": "hello world " * 45}]
        warm = session.chat(long, max_new_tokens=4)
        assert session._caches[0].values.shape[2] > length
        assert session._caches[0].values.dtype == "int8"
        cold = ChatSession(llm, jit_compile=False).chat(long, max_new_tokens=4)
        assert warm == cold
    finally:
        set_kv_cache_dtype(llm, None)


def test_bad_input_is_refused(llm):
    with pytest.raises(ValueError, match="chat template"):
        ChatSession(causal_lm(
            vocabulary_size=20, num_layers=1, num_heads=2, hidden_dim=8,
            intermediate_dim=16, max_sequence_length=16,
        ))  # fmt: skip
    session = ChatSession(llm, jit_compile=False)
    with pytest.raises(ValueError, match="max_sequence_length=512"):
        session.chat("hello", max_new_tokens=600)
    with pytest.raises(ValueError, match="max_new_tokens"):
        session.chat("hello", max_new_tokens=0)


def test_a_long_new_stretch_goes_through_the_chunked_prefill(llm, monkeypatch):
    monkeypatch.setattr(llm, "prompt_through_step", 0)
    session = ChatSession(llm, jit_compile=False)
    messages = [{"role": "user", "content": "hello world or"}]
    assert session.chat(messages, max_new_tokens=6) == chat_uncached(llm, messages, 6)
    messages += [
        {"role": "assistant", "content": "or"},
        {"role": "user", "content": "world"},
    ]
    assert session.chat(messages, max_new_tokens=6) == chat_uncached(llm, messages, 6)
    assert session.reused_length > 0


def test_sampling_and_stop_ids_as_in_chat(llm):
    session = ChatSession(llm, jit_compile=False)
    sampled = dict(sampler="top_k", top_k=4, temperature=2.0, seed=11)
    expected = llm.chat("hello", max_new_tokens=8, **sampled)
    assert session.chat("hello", max_new_tokens=8, **sampled) == expected
    # A stop id given ends the answer as the end of the turn would.
    tokenizer = llm.tokenizer
    prompt = [int(i) for i in tokenizer(tokenizer.apply_chat_template("hello"))]
    end = tokenizer.end_token_id
    ids = greedy_uncached(llm, prompt, 8, (end,))[len(prompt) :]
    k = next(k for k in range(1, len(ids)) if ids[k] not in ids[:k] + [end])
    answer = session.chat("hello", max_new_tokens=8, stop_token_ids=[ids[k]])
    assert answer == tokenizer.detokenize(ids[:k]).strip()
    assert session._ids[len(prompt) :] == ids[: k + 1]


def test_stream_pieces_join_to_the_answer(llm):
    session = ChatSession(llm, jit_compile=False)
    pieces = list(session.stream("world", max_new_tokens=8))
    assert "".join(pieces).strip() == chat_uncached(llm, "world", 8)


def test_settings_a_session_cannot_honour_are_refused(llm):
    session = ChatSession(llm, jit_compile=False)
    with pytest.raises(ValueError, match="return_scores=True"):
        session.chat("hello", max_new_tokens=2, return_scores=True)
    with pytest.raises(ValueError, match="sampler='beam'"):
        session.chat("hello", max_new_tokens=2, sampler="beam")
    with pytest.raises(ValueError, match="min_p"):
        session.chat("hello", max_new_tokens=2, min_p=0.2)  # greedy reads none

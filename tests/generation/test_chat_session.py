"""ChatSession: a later turn prefills only what follows the cached prefix,
and answers exactly as a fresh `chat` does."""

import keras
import pytest

from keras_tfm.convert import GGUFBytePairTokenizer
from keras_tfm.generation import ChatSession, chat_session, set_kv_cache_dtype
from keras_tfm.generation.chat_session import common_prefix_length
from tests.builders import causal_lm
from tests.convert.tiny_gguf import MERGES, SPECIALS, TEMPLATE, tiny_vocabulary
from tests.generation.uncached import chat_uncached


@pytest.fixture(scope="module")
def llm():
    tokens = tiny_vocabulary()
    tokenizer = GGUFBytePairTokenizer(
        {t: i for i, t in enumerate(tokens)},
        MERGES,
        unsplittable_tokens=SPECIALS,
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        chat_template=TEMPLATE,
    )
    keras.utils.set_random_seed(3)
    return causal_lm(
        vocabulary_size=len(tokens), num_layers=2, num_heads=4,
        num_key_value_heads=2, hidden_dim=32, intermediate_dim=64,
        max_sequence_length=512, position_encoding="rotary",
        normalization="rms_norm", activation="swiglu", use_bias=False,
        padding_id=None, tokenizer=tokenizer,
    )  # fmt: skip


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
    ((function, _),) = llm.compiled_loops.values()
    assert len(set(lengths)) < len(lengths)  # some turns share a length
    assert all(length % 64 == 0 for length in lengths)
    assert function.experimental_get_tracing_count() == len(set(lengths))


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

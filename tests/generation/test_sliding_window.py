"""Generation past the context window, and streaming, against the uncached pass."""

import keras
import numpy as np
import pytest

from tests.builders import causal_lm, graph_forward

LENGTH = 8  # max_sequence_length of the tiny models


def tiny(position_encoding, **kwargs):
    """A model with random weights (seeded), for greedy decoding checks."""
    keras.utils.set_random_seed(3)
    return causal_lm(
        vocabulary_size=23,
        num_layers=2,
        num_heads=2,
        hidden_dim=16,
        intermediate_dim=32,
        max_sequence_length=LENGTH,
        position_encoding=position_encoding,
        **kwargs,
    )


def sliding_reference(model, prompt, steps, shift):
    """nanoGPT's loop: the uncached full pass on the current window, each step.

    The window is the whole text until it would exceed LENGTH - 1 tokens of
    context; then it starts `shift` tokens later (re-filled from there).
    """
    tokens, start = list(prompt), 0
    forward = graph_forward(model)
    if len(tokens) >= LENGTH:
        start = len(tokens) - (LENGTH - shift)
    for _ in range(steps):
        if len(tokens) - start >= LENGTH:
            start += shift
        window = np.array([tokens[start:]])
        logits = keras.ops.convert_to_numpy(forward(window))
        tokens.append(int(np.argmax(logits[0, -1])))
    return tokens


# One model per position encoding: its compiled loops serve every test.
@pytest.fixture(scope="module", params=["rotary", "sinusoidal"])
def model(request):
    return tiny(request.param, padding_id=None)


@pytest.mark.parametrize("shift", [1, None])
def test_sliding_generation_equals_the_uncached_pass_on_each_window(model, shift):
    # Different lengths in one batch, one prompt longer than the window.
    prompts = [[5, 6, 7], [9], [3, 4, 5, 6, 7, 8, 9, 10, 11, 12]]
    steps = 2 * LENGTH + 2
    generated = model.generate(prompts, max_new_tokens=steps, window_shift=shift)
    expected_shift = LENGTH // 4 if shift is None else shift
    for prompt, row in zip(prompts, generated, strict=True):
        assert row == sliding_reference(model, prompt, steps, expected_shift)


def test_streamed_tokens_equal_the_compiled_loop_past_the_window(model):
    prompts = [[5, 6, 7], [9], [3, 4, 5, 6, 7, 8, 9, 10, 11, 12]]
    generated = model.generate(prompts, max_new_tokens=20, window_shift=3)
    streamed = [list(p) for p in prompts]
    for step in model.generate(prompts, max_new_tokens=20, window_shift=3, stream=True):
        assert len(step) == len(prompts) and any(t is not None for t in step)
        for row, token in zip(streamed, step, strict=True):
            if token is not None:
                row.append(token)
    assert streamed == generated


def test_streaming_within_the_window_stops_at_stop_ids():
    model = tiny("learned")
    prompt = [5, 6, 7]
    full = model.generate(prompt, max_new_tokens=4)
    stop = full[4]  # the second new token
    pieces = list(model.generate(prompt, max_new_tokens=4, stream=True))
    assert prompt + pieces == full
    stopped = list(
        model.generate(prompt, max_new_tokens=4, stream=True, stop_token_ids=[stop])
    )
    assert prompt + stopped == model.generate(
        prompt, max_new_tokens=4, stop_token_ids=[stop]
    )
    assert stopped[-1] == stop and len(stopped) <= 2


def test_learned_positions_say_how_many_tokens_still_fit():
    model = tiny("learned")
    with pytest.raises(ValueError, match=r"at most 5 new tokens.*max_new_tokens <= 5"):
        model.generate([[1, 2, 3]], max_new_tokens=6)
    with pytest.raises(ValueError, match="Shorten the prompt to at most 7 tokens"):
        model.generate([list(range(1, 9))], max_new_tokens=1)
    assert len(model.generate([1, 2, 3], max_new_tokens=5)) == LENGTH


def test_bad_window_shift_and_beam_search_past_the_window():
    model = tiny("rotary")
    with pytest.raises(ValueError, match="window_shift=8"):
        model.generate([1, 2], max_new_tokens=3, window_shift=LENGTH)
    with pytest.raises(ValueError, match="cannot stream or slide"):
        model.generate([1, 2], max_new_tokens=10, num_beams=2)
    with pytest.raises(ValueError, match="cannot stream or slide"):
        model.generate([1, 2], max_new_tokens=2, num_beams=2, stream=True)


def test_text_pieces_wait_for_a_whole_character():
    from keras_tfm.generation.outputs import stream_pieces

    def decode(ids):
        return bytes(ids).decode("utf-8", "replace")

    steps = [[0xC3], [0xA9], [0x21]]  # "é" in two bytes, then "!"
    pieces = list(stream_pieces(iter(steps), [[0x61]], "string", decode))
    assert pieces == ["é", "!"]
    batch = [[0xC3, None], [0xA9, 0x62]]
    pieces = list(stream_pieces(iter(batch), [[0x61], [0x61]], "strings", decode))
    assert pieces == [["é", "b"]]


def test_learned_positions_say_how_many_bytes_still_fit():
    import keras_hub

    model = causal_lm(
        vocabulary_size=256, num_layers=1, num_heads=2, hidden_dim=8,
        intermediate_dim=16, max_sequence_length=128,
        position_encoding="learned",
        tokenizer=keras_hub.tokenizers.ByteTokenizer(lowercase=False),
    )  # fmt: skip
    prompt = "And the LORD said unto Moses"  # 28 bytes
    with pytest.raises(ValueError, match="at most 100 new tokens"):
        model.generate(prompt, max_new_tokens=120)

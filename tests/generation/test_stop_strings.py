"""Stop strings: checked in the loop on the tokens' bytes, a real byte-level
BPE tokenizer, and a model whose greedy continuation is injected."""

import numpy as np
import pytest
import tensorflow as tf

from keras_tfm.generation import GenerationConfig
from keras_tfm.generation import stop_strings as stops
from keras_tfm.tokenizers.byte_level_bpe_tokenizer import ByteLevelBPETokenizer
from tests.builders import causal_lm
from tests.models.injected import WIDTH, inject

# Greedy from "A" follows the ids: "Amen. And the LORD said, LA..."
PIECES = ["<|endoftext|>", "A", "men", ".", "ĠAnd", "Ġthe", "Ġ", "L", "ORD",
          "Ġsaid", ",", "ĠL"]  # fmt: skip


@pytest.fixture(scope="module")
def tokenizer():
    return ByteLevelBPETokenizer(
        {p: i for i, p in enumerate(PIECES)}, ["Ġ L"], pre_tokenizer="gpt2",
        unsplittable_tokens=["<|endoftext|>"], eos_token="<|endoftext|>",
    )  # fmt: skip


@pytest.fixture(scope="module")
def model(tokenizer):
    model = causal_lm(
        vocabulary_size=12, num_layers=1, num_heads=2, hidden_dim=WIDTH,
        intermediate_dim=WIDTH, max_sequence_length=16,
        position_encoding="rotary", tokenizer=tokenizer,
    )  # fmt: skip
    inject(model, 12)
    return model


def test_token_bytes_rebuild_the_detokenized_text(tokenizer):
    pieces = stops.token_bytes(tokenizer, 12)
    ids = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]
    assert b"".join(pieces[i] for i in ids).decode() == tokenizer.detokenize(ids)
    table = stops.byte_table(pieces, width=4)
    assert table[4].tolist() == list(b" And")  # right-aligned, last 4 bytes
    assert table[3].tolist() == [-1, -1, -1, ord(".")]


def reference_hit(text, new_count, strings):
    """A stop string ends inside the last `new_count` bytes (or at the end)."""
    return any(
        text.find(s, max(0, len(text) - new_count - len(s) + 1)) >= 0
        and any(text[: len(text) - d].endswith(s) for d in range(new_count))
        for s in strings
    )


def test_the_in_graph_check_matches_a_python_reference():
    rng = np.random.default_rng(0)
    strings = [[b"ab", b"bca"], [b"c"], [b"aab", b"b"]]
    table = stops.string_table([[s.decode() for s in row] for row in strings])
    texts = [b""] * 3
    tail = tf.fill([3, table.shape[2] + 4], -1)
    for _ in range(30):
        pieces = [
            bytes(rng.choice(list(b"abc"), rng.integers(1, 5)).tolist())
            for _ in range(3)
        ]
        new = stops.byte_table(pieces, width=4)
        tail, count = stops.append_bytes(tail, tf.constant(new))
        hit = stops.ends_with_stop_string(tail, tf.constant(table), count).numpy()
        for i, piece in enumerate(pieces):
            texts[i] += piece
            assert tail[i, -len(texts[i][-20:]) :].numpy().tolist() == list(
                texts[i][-20:]
            )
            assert hit[i] == reference_hit(texts[i], len(piece), strings[i])


def test_generation_ends_on_a_stop_string_spanning_tokens(model):
    assert model.generate("A", 8) == "Amen. And the LORD said"
    # "d the L" spans four tokens; "ORD s" ends inside the token " said".
    assert model.generate("A", 8, stop_strings=["d the L"]) == "Amen. An"
    assert model.generate("A", 8, stop_strings=["zz", "ORD s"]) == "Amen. And the L"
    # Ids end with the token that completed the string.
    assert model.generate([1], 8, stop_strings="ORD s") == list(range(1, 10))
    # Per row: each row its own strings; the prompt ("A") is not searched.
    configs = [GenerationConfig(stop_strings=["A"]), GenerationConfig()]
    assert model.generate(["A", "A"], 4, generation_config=configs) == [
        "Amen. ",
        "Amen. And the",
    ]
    # One compiled loop for all of the above (batch 1 and batch 2).
    (function,) = model.compiled_loops.values()
    assert function.experimental_get_tracing_count() == 2


def test_stop_strings_need_a_tokenizer_and_the_tensor_loop(model):
    with pytest.raises(ValueError, match="stop_strings"):
        model.generate("A", 4, sampler="beam", num_beams=2, stop_strings=["x"])
    bare = causal_lm(vocabulary_size=12, num_layers=1, num_heads=2, hidden_dim=8,
                     intermediate_dim=8, max_sequence_length=16)  # fmt: skip
    with pytest.raises(ValueError, match="needs the model's tokenizer"):
        bare.generate([1, 2], 3, stop_strings=["x"])


def test_streaming_stops_alike_and_never_shows_a_piece_of_the_stop_string(model):
    pieces = list(model.generate("A", 8, stop_strings=["d the L"], stream=True))
    assert "".join(pieces) == "men. An"  # the non-streamed "Amen. An", less "A"
    assert not any("d" in piece for piece in pieces)  # " And" held back, then cut
    steps = list(model.generate([1], 8, stop_strings="ORD s", stream=True))
    assert steps == list(range(2, 10))  # ends with the token completing it
    # A string held back and never completed comes out at the end.
    held = list(model.generate("A", 2, stop_strings=[". B"], stream=True))
    assert held == ["men", "."]  # "." waited for a " B" that never came


def test_streaming_stops_on_a_string_across_the_window_refill(model):
    prompt = model.tokenizer.detokenize(list(range(1, 12)))  # 11 of 16 tokens
    # New tokens: "Amen. And the| L..." with the window sliding at position
    # 16, between " the" and " " (the string spans the refill).
    pieces = model.generate(prompt, 20, stop_strings=["the L"], stream=True)
    assert "".join(pieces) == "Amen. And "
    with pytest.raises(ValueError, match="only with stream=True"):
        model.generate(prompt, 20, stop_strings=["the L"])
    with pytest.raises(ValueError, match="return_scores"):
        model.generate("A", 4, stream=True, return_scores=True)

"""The one streamed-text helper: UTF-8 hold-back, stop-string hold-back.

Tokens here are hand-made byte strings (a multi-byte character split across
tokens, stop strings split across pieces); the expected pieces are written
out by hand. Pure Python: the module must import without TensorFlow."""

import subprocess
import sys

from keras_tfm.lite.stop_text import TextStream, text_pieces

TOKENS = [b"caf", b"\xc3", b"\xa9 ", b"\xe2\x82", b"\xac!", b"St", b"OP", b" end"]


def detokenize(ids):
    return b"".join(TOKENS[i] for i in ids).decode("utf-8", "replace")


def pushed(stream, ids):
    return [stream.push(i) for i in ids]


def test_a_character_split_across_tokens_is_shown_whole():
    # "é" is C3 A9, "€" E2 82 AC: each split across two tokens.
    stream = TextStream(detokenize)
    assert pushed(stream, [0, 1, 2, 3, 4]) == [
        ("caf", False), ("", False), ("é ", False), ("", False), ("€!", False),
    ]  # fmt: skip
    assert stream.flush() == ("", False) and stream.text == "café €!"


def test_a_cut_character_that_stays_cut_comes_out_at_the_end():
    stream = TextStream(detokenize)
    assert pushed(stream, [0, 1]) == [("caf", False), ("", False)]
    assert stream.flush() == ("\ufffd", False)


def test_a_stop_string_split_across_pieces_is_never_shown():
    # "StOP" arrives as "St" then "OP": "St" may begin it, so it waits.
    stream = TextStream(detokenize, ["StOP"])
    assert pushed(stream, [0, 5, 6, 7]) == [
        ("caf", False), ("", False), ("", True), ("", True),
    ]  # fmt: skip
    assert stream.text == "caf" and stream.flush() == ("", True)


def test_a_prefix_that_is_no_stop_string_is_released():
    # "St" may begin "StX"; "OP" shows it was not one.
    stream = TextStream(detokenize, ["StX"])
    assert pushed(stream, [5, 6]) == [("", False), ("StOP", False)]
    # Held at the end of the answer, it is released by `flush`.
    stream = TextStream(detokenize, ["StX"])
    assert pushed(stream, [0, 5]) == [("caf", False), ("", False)]
    assert stream.flush() == ("St", False)


def test_a_stop_string_after_a_split_character():
    # The stop string "€!" starts inside the character cut across tokens.
    assert list(text_pieces(detokenize, [0, 1, 2, 3, 4, 5], ["€!"])) == ["caf", "é "]


def test_the_prompt_is_neither_shown_nor_searched():
    stream = TextStream(detokenize, ["caf"], prompt=[0])
    assert pushed(stream, [1, 2]) == [("", False), ("é ", False)]
    assert stream.text == "é "


def test_text_pieces_end_at_a_stop_id_or_none():
    assert list(text_pieces(detokenize, [0, 1, 2, 7, 5], stop_token_ids=[7])) == [
        "caf", "é ",
    ]  # fmt: skip
    assert list(text_pieces(detokenize, iter([0, None, 5]))) == ["caf"]


def test_imports_without_tensorflow_or_keras():
    code = (
        "import sys, keras_tfm.lite.stop_text, keras_tfm.lite.litert_chat; "
        "print(sorted({'tensorflow', 'keras', 'keras_hub', 'jax'} & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"

"""Text deltas from tokens: whole characters, stop strings across tokens."""

from keras_tfm.serving.text_stream import TextStream


def byte_stream(pieces, stop=()):
    """A TextStream over tokens that are byte strings (UTF-8 split anywhere)."""
    return TextStream(
        lambda ids: b"".join(pieces[i] for i in ids).decode("utf-8", "replace"), stop
    )


def feed(stream, ids):
    deltas = []
    for i in ids:
        delta, stopped = stream.push(i)
        deltas.append(delta)
        if stopped:
            return deltas, True
    delta, stopped = stream.flush()
    return deltas + [delta], stopped


def test_a_character_split_across_tokens_is_sent_whole():
    pieces = [b"caf", b"\xc3", b"\xa9!"]
    deltas, stopped = feed(byte_stream(pieces), [0, 1, 2])
    assert deltas == ["caf", "", "\u00e9!", ""] and not stopped


def test_a_stop_string_spanning_tokens_ends_the_text_before_it():
    pieces = [b"one ", b"tw", b"o th", b"ree"]
    deltas, stopped = feed(byte_stream(pieces, ["two"]), [0, 1, 2, 3])
    assert stopped and "".join(deltas) == "one "


def test_a_possible_stop_prefix_is_held_then_released():
    pieces = [b"ab", b"c", b"d"]
    stream = byte_stream(pieces, ["cx"])
    assert stream.push(0) == ("ab", False)
    assert stream.push(1) == ("", False)  # "c" may begin "cx"
    assert stream.push(2) == ("cd", False)
    assert stream.flush() == ("", False)


def test_the_end_of_the_answer_sends_what_was_held_and_checks_the_stop():
    stream = byte_stream([b"x", b"\xc3"], ["zz"])
    assert stream.push(0) == ("x", False)
    assert stream.push(1) == ("", False)  # half a character, then the end
    assert stream.flush() == ("\ufffd", False)
    stream = byte_stream([b"az", b"z"], ["zz"])
    assert stream.push(0) == ("a", False)
    assert stream.push(1) == ("", True) and stream.text == "a"

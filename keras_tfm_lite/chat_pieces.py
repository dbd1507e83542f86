"""A chat answer streamed as text: new pieces as the ids come."""

from keras_tfm_lite.stop_text import visible_text


def answer_pieces(tokenizer, steps, end_id, stop_strings=()):
    """New text per generated id, held back while it ends mid-character or
    with what may be the start of one of `stop_strings` (the answer is cut
    before the first of them, as `chat` cuts it).

    Args:
        tokenizer: the tokenizer that detokenizes the answer's ids.
        steps: the ids `generate(..., stream=True)` yields (None: nothing new).
        end_id: the id that ends the answer (not shown).

    Example:
    >>> class ByteTokenizer:  # one id a byte
    ...     def detokenize(self, ids):
    ...         return bytes(ids).decode("utf-8", "replace")
    >>> tokenizer = ByteTokenizer()
    >>> list(answer_pieces(tokenizer, iter([72, 105, 0, 33]), end_id=0))
    ['H', 'i']
    >>> list(answer_pieces(tokenizer, iter([72, 105, 33, 0]), 0, ["i!"]))
    ['H']
    """
    answer, shown = [], ""

    def text(final=False):
        text = tokenizer.detokenize(answer)
        text = (text if isinstance(text, str) else text.numpy().decode()).lstrip()
        return visible_text(text, stop_strings, 0, final)

    for token in steps:
        if token is None or int(token) == end_id:
            break
        answer.append(int(token))
        new = text()
        if new.endswith("\ufffd") or not new.startswith(shown):
            continue  # half of a multi-byte UTF-8 character
        if new != shown:
            yield new[len(shown) :]
        shown = new
    final = text(final=True)  # what was held back and is no stop string
    if final.startswith(shown) and final != shown:
        yield final[len(shown) :]

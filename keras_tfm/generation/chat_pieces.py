"""A chat answer streamed as text: new pieces as the ids come."""


def answer_pieces(tokenizer, steps, end_id):
    """New text per generated id, held back while it ends mid-character.

    Args:
        tokenizer: the tokenizer that detokenizes the answer's ids.
        steps: the ids `generate(..., stream=True)` yields (None: nothing new).
        end_id: the id that ends the answer (not shown).

    Example:
    >>> import keras_hub
    >>> tokenizer = keras_hub.tokenizers.ByteTokenizer()
    >>> list(answer_pieces(tokenizer, iter([72, 105, 0, 33]), end_id=0))
    ['H', 'i']
    """
    answer, shown = [], ""
    for token in steps:
        if token is None or int(token) == end_id:
            break
        answer.append(int(token))
        text = tokenizer.detokenize(answer)
        text = (text if isinstance(text, str) else text.numpy().decode()).lstrip()
        if text.endswith("\ufffd"):  # half of a multi-byte UTF-8 character
            continue
        yield text[len(shown) :]
        shown = text

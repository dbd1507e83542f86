"""The `logprobs` objects of OpenAI's answers, from (token id, logprob) pairs.

Chat answers carry `{"content": [{"token", "logprob", "bytes",
"top_logprobs"}]}`, completions the older `{"tokens", "token_logprobs",
"top_logprobs", "text_offset"}`; `top_logprobs` is always empty (chat) or
None (completions): the server returns the chosen tokens' log-probabilities
only. A token's text comes from its UTF-8 bytes (`bytes`): a piece of a
character split across tokens is shown with U+FFFD, as the bytes are not.
"""

class TokenLogprobs:
    """Formats one answer's pairs, a streamed chunk at a time or all at once.

    Args:
        pieces: per token id, the UTF-8 bytes it adds
            (`keras_tfm.generation.stop_strings.token_bytes`).
        chat: the chat layout, else the completions one.

    Example:
    >>> from keras_tfm.serving.token_logprobs import TokenLogprobs
    >>> format = TokenLogprobs([b"a", b"bc"], chat=False)
    >>> format([(1, -0.5), (0, -1.0)])["text_offset"]
    [0, 2]
    >>> format([(0, -2.0)])["text_offset"]  # the next chunk goes on counting
    [3]
    >>> TokenLogprobs([b"a"], chat=True)([(0, -0.25)])["content"][0]["bytes"]
    [97]
    """

    def __init__(self, pieces, chat):
        self.pieces = pieces
        self.chat = chat
        self.offset = 0

    def __call__(self, pairs):
        texts = [self.pieces[t].decode("utf-8", errors="replace") for t, _ in pairs]
        if self.chat:
            return {
                "content": [
                    {"token": text, "logprob": logprob,
                     "bytes": list(self.pieces[token]), "top_logprobs": []}
                    for text, (token, logprob) in zip(texts, pairs, strict=True)
                ]
            }  # fmt: skip
        offsets = []
        for text in texts:
            offsets.append(self.offset)
            self.offset += len(text)
        return {
            "tokens": texts,
            "token_logprobs": [logprob for _, logprob in pairs],
            "top_logprobs": None,
            "text_offset": offsets,
        }


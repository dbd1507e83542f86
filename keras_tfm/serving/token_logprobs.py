"""The `logprobs` objects of OpenAI's answers, from each token's scores.

Chat answers carry `{"content": [{"token", "logprob", "bytes",
"top_logprobs"}]}`, `top_logprobs` a list of `{"token", "logprob",
"bytes"}`; completions the older `{"tokens", "token_logprobs",
"top_logprobs", "text_offset"}`, `top_logprobs` a `{text: logprob}` per
token (None when no alternatives were asked for; two alternatives of the
same text share one key, as in OpenAI's layout). A token's text comes
from its UTF-8 bytes (`bytes`): a piece of a character split across
tokens is shown with U+FFFD, as the bytes are not.
"""


class TokenLogprobs:
    """Formats one answer's scores, a streamed chunk at a time or all at once.

    Args:
        pieces: per token id, the UTF-8 bytes it adds
            (`keras_tfm.generation.stop_strings.token_bytes`).
        chat: the chat layout, else the completions one.
        top_logprobs: how many alternatives each token comes with (0: none).

    Each call takes a list of `(token_id, logprob, alternatives)`,
    `alternatives` the `(token_id, logprob)` pairs of the step's most
    likely tokens, most likely first.

    Example:
    >>> from keras_tfm.serving.token_logprobs import TokenLogprobs
    >>> format = TokenLogprobs([b"a", b"bc"], chat=False)
    >>> format([(1, -0.5, []), (0, -1.0, [])])["text_offset"]
    [0, 2]
    >>> format([(0, -2.0, [])])["text_offset"]  # the next chunk goes on counting
    [3]
    >>> chat = TokenLogprobs([b"a", b"bc"], chat=True, top_logprobs=2)
    >>> entry = chat([(0, -0.25, [(0, -0.25), (1, -1.5)])])["content"][0]
    >>> entry["bytes"], [(t["token"], t["logprob"]) for t in entry["top_logprobs"]]
    ([97], [('a', -0.25), ('bc', -1.5)])
    >>> TokenLogprobs([b"a", b"bc"], False, 1)([(1, -0.5, [(1, -0.5)])])["top_logprobs"]
    [{'bc': -0.5}]
    """

    def __init__(self, pieces, chat, top_logprobs=0):
        self.pieces = pieces
        self.chat = chat
        self.top_logprobs = top_logprobs
        self.offset = 0

    def text(self, token):
        return self.pieces[token].decode("utf-8", errors="replace")

    def entry(self, token, logprob):
        """The chat layout's `{"token", "logprob", "bytes"}` of one token."""
        return {
            "token": self.text(token),
            "logprob": logprob,
            "bytes": list(self.pieces[token]),
        }

    def by_text(self, alternatives):
        """The completions layout's `{text: logprob}`: the likelier of two
        tokens with the same text keeps the key."""
        top = {}
        for token, logprob in alternatives:
            top.setdefault(self.text(token), logprob)
        return top

    def __call__(self, scores):
        if self.chat:
            return {
                "content": [
                    dict(self.entry(token, logprob),
                         top_logprobs=[self.entry(*pair) for pair in alternatives])
                    for token, logprob, alternatives in scores
                ]
            }  # fmt: skip
        texts = [self.text(token) for token, _, _ in scores]
        offsets = []
        for text in texts:
            offsets.append(self.offset)
            self.offset += len(text)
        top = None
        if self.top_logprobs:
            top = [self.by_text(alternatives) for _, _, alternatives in scores]
        return {
            "tokens": texts,
            "token_logprobs": [logprob for _, logprob, _ in scores],
            "top_logprobs": top,
            "text_offset": offsets,
        }

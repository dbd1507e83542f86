"""Logit processors: penalties and bans applied to each step's logits, in-graph.

Each processor reads the decoding buffer and per-row settings (tensors, see
`generation_config.settings_tensors`), so that one compiled loop serves any
values. keras-hub's samplers offer none of these (keras-hub issue #2062),
hence this hand-written path.

Order of composition (HF's order where it has one; `process_logits`):

1. `repetition_penalty` (HF's `RepetitionPenaltyLogitsProcessor`): for
   every token present in the prompt or the output, a positive logit is
   divided by the penalty and a negative one multiplied by it.
2. `presence_penalty` and `frequency_penalty` (OpenAI's definition):
   logit[j] -= frequency_penalty * c[j] + presence_penalty * (c[j] > 0),
   c[j] the count of token j in the output so far (not the prompt).
3. `no_repeat_ngram_size` n (HF's `NoRepeatNGramLogitsProcessor`): a token
   that would complete an n-gram already present in the prompt plus output
   gets -inf.
4. `bad_words_ids` (HF's `NoBadWordsLogitsProcessor`): the last token of
   each banned sequence gets -inf when the tokens before it end the text
   (single tokens are always banned).

The warpers (temperature, top-k, top-p, min-p) follow in `sampling`.

All processors see the tokens at positions `< index` of the buffer (the
prompt and what was generated), row by row: no row reads another.
"""

from keras import ops

NEG_INF = float("-inf")


def _row_ids(tokens):
    """(batch, length, 2) indices (row, token) for scattering into (batch, V)."""
    batch, length = ops.shape(tokens)[0], ops.shape(tokens)[1]
    rows = ops.broadcast_to(ops.arange(batch, dtype="int32")[:, None], (batch, length))
    return ops.stack([rows, ops.cast(tokens, "int32")], axis=-1)


def token_counts(tokens, weights, vocabulary_size):
    """float32 (batch, V): per row, the summed `weights` of each token id.

    Example:
    >>> ops.convert_to_numpy(token_counts([[1, 1, 2]], [[1.0, 1.0, 0.0]], 4))
    array([[0., 2., 0., 0.]], dtype=float32)
    """
    tokens = ops.convert_to_tensor(tokens, "int32")
    weights = ops.cast(weights, "float32")
    shape = (ops.shape(tokens)[0], vocabulary_size)
    return ops.scatter(_row_ids(tokens), weights, shape)


def seen_masks(tokens, index, prompt_mask):
    """`(seen, generated)` bool (batch, length): positions before `index`,
    and those of them not in the prompt."""
    positions = ops.arange(ops.shape(tokens)[1], dtype="int32")[None, :]
    seen = ops.broadcast_to(positions < index, ops.shape(tokens))
    return seen, ops.logical_and(seen, ops.logical_not(prompt_mask))


def repetition_penalty(logits, seen_counts, penalty):
    """HF's repetition penalty on tokens with a positive `seen_counts`.

    Example:
    >>> out = repetition_penalty(np.array([[2.0, -2.0, 2.0]], "float32"),
    ...                          np.array([[1.0, 1.0, 0.0]], "float32"),
    ...                          np.array([2.0], "float32"))
    >>> ops.convert_to_numpy(out)
    array([[ 1., -4.,  2.]], dtype=float32)
    """
    penalty = penalty[:, None]
    penalized = ops.where(logits > 0, logits / penalty, logits * penalty)
    return ops.where(seen_counts > 0, penalized, logits)


def presence_frequency_penalty(logits, generated_counts, presence, frequency):
    """OpenAI's presence and frequency penalties on the output's counts."""
    present = ops.cast(generated_counts > 0, "float32")
    return logits - frequency[:, None] * generated_counts - presence[:, None] * present


def banned_ngram_tokens(tokens, index, size, vocabulary_size, max_size):
    """bool (batch, V): the tokens that would repeat an n-gram of `size`.

    For row b with n = size[b] > 0 and index >= n - 1: every j with
    j + n <= index whose tokens j ... j + n - 2 equal the last n - 1 tokens
    (positions index - n + 1 ... index - 1) bans token j + n - 1. The
    comparison spans `max_size` - 1 offsets (a static bound), all at once:
    one set of ops to trace, not one per offset.
    """
    length = ops.shape(tokens)[1]
    tokens = ops.cast(tokens, "int32")
    size = ops.cast(size, "int32")[:, None]  # (B, 1)
    starts = ops.arange(length, dtype="int32")[None, :]  # (1, L)
    match = ops.logical_and(size > 0, starts + size <= index)
    match = ops.logical_and(match, index >= size - 1)
    offsets = ops.arange(max_size - 1, dtype="int32")[:, None]  # (K, 1)
    active = offsets[None, :, 0] < size - 1  # (B, K)
    shifted = ops.take(tokens, ops.minimum(starts + offsets, length - 1), axis=1)
    target_position = ops.clip(index - size + 1 + offsets[None, :, 0], 0, length - 1)
    target = ops.take_along_axis(tokens, target_position, axis=1)  # (B, K)
    equal = ops.equal(shifted, target[:, :, None])  # (B, K, L)
    agree = ops.logical_or(ops.logical_not(active)[:, :, None], equal)
    match = ops.logical_and(match, ops.all(agree, axis=1))
    following = ops.take_along_axis(
        tokens, ops.clip(starts + size - 1, 0, length - 1), axis=1
    )
    return token_counts(following, ops.cast(match, "float32"), vocabulary_size) > 0


def banned_bad_words(tokens, index, bad_words, vocabulary_size):
    """bool (batch, V): the banned last tokens of `bad_words` whose prefix
    ends the text.

    `bad_words` is int32 (batch, words, length), each sequence right-aligned
    and padded with -1 (see `settings_tensors`).
    """
    tokens = ops.cast(tokens, "int32")
    length = ops.shape(tokens)[1]
    prefix_length = ops.shape(bad_words)[2] - 1
    positions = index - prefix_length + ops.arange(prefix_length, dtype="int32")
    tail = ops.take(tokens, ops.clip(positions, 0, length - 1), axis=1)
    tail = ops.where(positions[None, :] >= 0, tail, -2)  # before the text: no match
    prefix = bad_words[:, :, :-1]  # (B, W, M-1)
    agree = ops.logical_or(prefix < 0, ops.equal(prefix, tail[:, None, :]))
    match = ops.logical_and(ops.all(agree, axis=-1), bad_words[:, :, -1] >= 0)
    last = ops.maximum(bad_words[:, :, -1], 0)  # (B, W)
    return token_counts(last, ops.cast(match, "float32"), vocabulary_size) > 0


def process_logits(logits, tokens, index, prompt_mask, settings, max_ngram_size=8):
    """The processors, in the order of the module docstring.

    Args:
        logits: float32 (batch, V), the model's logits for position `index`.
        tokens: int (batch, length), the decoding buffer.
        index: scalar int32, the position being decoded.
        prompt_mask: bool (batch, length), True on prompt positions.
        settings: the dict of `settings_tensors` (as tensors).
        max_ngram_size: the static bound of `no_repeat_ngram_size`.

    Returns:
        float32 (batch, V), the processed logits. Each processor is skipped
        at run time (`ops.cond`) when no row turns it on.
    """
    logits = ops.cast(logits, "float32")
    vocabulary_size = ops.shape(logits)[1]
    index = ops.cast(index, "int32")
    seen, generated = seen_masks(tokens, index, prompt_mask)
    penalty = settings["repetition_penalty"]
    presence, frequency = settings["presence_penalty"], settings["frequency_penalty"]
    size = settings["no_repeat_ngram_size"]
    bad_words = settings["bad_words"]

    def penalize(logits):
        seen_counts = token_counts(tokens, seen, vocabulary_size)
        logits = repetition_penalty(logits, seen_counts, penalty)
        generated_counts = token_counts(tokens, generated, vocabulary_size)
        return presence_frequency_penalty(logits, generated_counts, presence, frequency)

    def ban(logits):
        banned = banned_ngram_tokens(
            tokens, index, size, vocabulary_size, max_ngram_size
        )
        banned = ops.logical_or(
            banned, banned_bad_words(tokens, index, bad_words, vocabulary_size)
        )
        return ops.where(banned, NEG_INF, logits)

    penalties_on = ops.any((penalty != 1.0) | (presence != 0.0) | (frequency != 0.0))
    bans_on = ops.any(size > 0) | ops.any(bad_words[:, :, -1] >= 0)
    logits = ops.cond(penalties_on, lambda: penalize(logits), lambda: logits)
    return ops.cond(bans_on, lambda: ban(logits), lambda: logits)

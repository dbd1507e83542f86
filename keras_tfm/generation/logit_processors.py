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

from keras_tfm._optional import tensorflow as tf

NEG_INF = float("-inf")


def _row_ids(tokens):
    """(batch, length, 2) indices (row, token) for scattering into (batch, V)."""
    batch, length = tf.shape(tokens)[0], tf.shape(tokens)[1]
    rows = tf.broadcast_to(tf.range(batch)[:, None], (batch, length))
    return tf.stack([rows, tf.cast(tokens, "int32")], axis=-1)


def token_counts(tokens, weights, vocabulary_size):
    """float32 (batch, V): per row, the summed `weights` of each token id.

    Example:
    >>> token_counts([[1, 1, 2]], [[1.0, 1.0, 0.0]], 4).numpy()
    array([[0., 2., 0., 0.]], dtype=float32)
    """
    tokens = tf.convert_to_tensor(tokens, "int32")
    weights = tf.cast(weights, "float32")
    shape = tf.stack([tf.shape(tokens)[0], vocabulary_size])
    return tf.scatter_nd(_row_ids(tokens), weights, shape)


def seen_masks(tokens, index, prompt_mask):
    """`(seen, generated)` bool (batch, length): positions before `index`,
    and those of them not in the prompt."""
    positions = tf.range(tf.shape(tokens)[1])[None, :]
    seen = tf.broadcast_to(positions < index, tf.shape(tokens))
    return seen, tf.logical_and(seen, tf.logical_not(prompt_mask))


def repetition_penalty(logits, seen_counts, penalty):
    """HF's repetition penalty on tokens with a positive `seen_counts`.

    Example:
    >>> repetition_penalty(tf.constant([[2.0, -2.0, 2.0]]),
    ...                    tf.constant([[1.0, 1.0, 0.0]]), tf.constant([2.0]))
    <tf.Tensor: shape=(1, 3), dtype=float32, numpy=array([[ 1., -4.,  2.]], dtype=float32)>
    """  # noqa: E501
    penalty = penalty[:, None]
    penalized = tf.where(logits > 0, logits / penalty, logits * penalty)
    return tf.where(seen_counts > 0, penalized, logits)


def presence_frequency_penalty(logits, generated_counts, presence, frequency):
    """OpenAI's presence and frequency penalties on the output's counts."""
    present = tf.cast(generated_counts > 0, "float32")
    return logits - frequency[:, None] * generated_counts - presence[:, None] * present


def banned_ngram_tokens(tokens, index, size, vocabulary_size, max_size):
    """bool (batch, V): the tokens that would repeat an n-gram of `size`.

    For row b with n = size[b] > 0 and index >= n - 1: every j with
    j + n <= index whose tokens j ... j + n - 2 equal the last n - 1 tokens
    (positions index - n + 1 ... index - 1) bans token j + n - 1. The
    comparison is unrolled to `max_size` - 1 positions (a static bound).
    """
    length = tf.shape(tokens)[1]
    tokens = tf.cast(tokens, "int32")
    size = tf.cast(size, "int32")[:, None]  # (B, 1)
    starts = tf.range(length)[None, :]  # (1, L)
    match = tf.logical_and(size > 0, starts + size <= index)
    match = tf.logical_and(match, index >= size - 1)
    for k in range(max_size - 1):
        active = k < size - 1  # (B, 1)
        shifted = tf.gather(tokens, tf.minimum(starts[0] + k, length - 1), axis=1)
        target_position = tf.clip_by_value(index - size + 1 + k, 0, length - 1)
        target = tf.gather(tokens, target_position, axis=1, batch_dims=1)  # (B, 1)
        equal = tf.equal(shifted, target)
        match = tf.logical_and(match, tf.logical_or(tf.logical_not(active), equal))
    following = tf.gather(
        tokens, tf.clip_by_value(starts + size - 1, 0, length - 1), batch_dims=1
    )
    return token_counts(following, tf.cast(match, "float32"), vocabulary_size) > 0


def banned_bad_words(tokens, index, bad_words, vocabulary_size):
    """bool (batch, V): the banned last tokens of `bad_words` whose prefix
    ends the text.

    `bad_words` is int32 (batch, words, length), each sequence right-aligned
    and padded with -1 (see `settings_tensors`).
    """
    tokens = tf.cast(tokens, "int32")
    length = tf.shape(tokens)[1]
    prefix_length = tf.shape(bad_words)[2] - 1
    positions = index - prefix_length + tf.range(prefix_length)  # (M-1,)
    tail = tf.gather(tokens, tf.clip_by_value(positions, 0, length - 1), axis=1)
    tail = tf.where(positions[None, :] >= 0, tail, -2)  # before the text: no match
    prefix = bad_words[:, :, :-1]  # (B, W, M-1)
    agree = tf.logical_or(prefix < 0, tf.equal(prefix, tail[:, None, :]))
    match = tf.logical_and(tf.reduce_all(agree, axis=-1), bad_words[:, :, -1] >= 0)
    last = tf.maximum(bad_words[:, :, -1], 0)  # (B, W)
    return token_counts(last, tf.cast(match, "float32"), vocabulary_size) > 0


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
        at run time (`tf.cond`) when no row turns it on.
    """
    logits = tf.cast(logits, "float32")
    vocabulary_size = tf.shape(logits)[1]
    index = tf.cast(index, "int32")
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
        banned = tf.logical_or(
            banned, banned_bad_words(tokens, index, bad_words, vocabulary_size)
        )
        return tf.where(banned, NEG_INF, logits)

    penalties_on = tf.reduce_any(
        (penalty != 1.0) | (presence != 0.0) | (frequency != 0.0)
    )
    bans_on = tf.reduce_any(size > 0) | tf.reduce_any(bad_words[:, :, -1] >= 0)
    logits = tf.cond(penalties_on, lambda: penalize(logits), lambda: logits)
    return tf.cond(bans_on, lambda: ban(logits), lambda: logits)

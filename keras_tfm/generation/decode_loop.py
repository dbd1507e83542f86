"""The decoding loop of the built-in samplers: settings are tensors.

One `tf.while_loop` decodes positions `index ... end - 1` of a buffer with
the model's cached step, the logit processors and the sampler, all reading
the per-row settings dict (`settings_tensors`) as inputs. Compiled once per
(batch, buffer length), it serves every temperature, top-k, top-p, min-p,
penalty, seed and stop id without being traced again.
"""

import tensorflow as tf

from keras_tfm.generation import logit_processors, sampling

MAX_NGRAM_SIZE = 8


def take_column(x, index):
    """`x[:, index]` as a gather: XLA takes `index` at run time (no recompile)."""
    return tf.gather(x, index, axis=1)


def step_tokens(logits, tokens, index, prompt_mask, settings):
    """The next token per row from `logits` (batch, V): processors, sampler,
    and the prompt's own token where the row is still in its prompt."""
    processed = logit_processors.process_logits(
        logits, tokens, index, prompt_mask, settings, MAX_NGRAM_SIZE
    )
    token = sampling.next_tokens(processed, settings, index)
    forced = take_column(prompt_mask, index)
    return tf.where(forced, take_column(tokens, index), token), forced


def is_stop(token, stop_token_ids):
    """bool (batch,): whether `token` is one of the row's stop ids."""
    return tf.reduce_any(tf.equal(token[:, None], stop_token_ids), axis=-1)


def chosen_log_probabilities(logits, token):
    """float32 (batch,): the model's log-probability of `token` (before any
    processor or temperature), log_softmax(logits)[token]."""
    log_probabilities = tf.nn.log_softmax(tf.cast(logits, "float32"), axis=-1)
    return tf.gather(log_probabilities, token, axis=1, batch_dims=1)


def decode(next, tokens, cache, index, end, prompt_mask, settings):
    """Decodes `tokens` from `index` to `end` (exclusive).

    Args:
        next: `next(tokens, cache, index) -> (logits, cache)`, logits
            float32 (batch, V) for position `index` (the model's step).
        tokens: int32 (batch, length), the prompts right-padded.
        cache: the loop-carried cache (any nest of tensors).
        index: scalar int32, the first position to decode.
        end: scalar int32, the position after the last one to decode.
        prompt_mask: bool (batch, length), True on prompt positions.
        settings: the dict of `settings_tensors`, as tensors.

    Returns:
        `(tokens, log_probabilities)`: the buffer with positions
        `index ... end - 1` decoded, and float32 (batch, length) the
        model's log-probability of each decoded token (0 elsewhere). The
        loop ends early when every row has produced one of its stop ids.
    """
    tokens = tf.cast(tokens, "int32")
    prompt_mask = tf.cast(prompt_mask, "bool")
    index = tf.cast(index, "int32")
    end = tf.cast(end, "int32")
    stop_token_ids = settings["stop_token_ids"]
    batch, length = tf.shape(tokens)[0], tf.shape(tokens)[1]
    done = tf.zeros((batch,), "bool")
    log_probabilities = tf.zeros((batch, length), "float32")

    def cond(tokens, cache, index, done, log_probabilities):
        return tf.logical_not(tf.reduce_all(done))

    def body(tokens, cache, index, done, log_probabilities):
        logits, cache = next(tokens, cache, index)
        token, forced = step_tokens(logits, tokens, index, prompt_mask, settings)
        column = tf.one_hot(index, length, on_value=True, off_value=False)[None, :]
        tokens = tf.where(column, token[:, None], tokens)
        chosen = tf.where(forced, 0.0, chosen_log_probabilities(logits, token))
        log_probabilities = tf.where(column, chosen[:, None], log_probabilities)
        stopped = tf.logical_and(tf.logical_not(forced), is_stop(token, stop_token_ids))
        return tokens, cache, index + 1, tf.logical_or(done, stopped), log_probabilities

    tokens, _, _, _, log_probabilities = tf.while_loop(
        cond,
        body,
        (tokens, cache, index, done, log_probabilities),
        maximum_iterations=tf.maximum(end - index, 0),
    )
    return tokens, log_probabilities


PREFILL_CHUNKS = (128, 16)
"""The prefill's chunk sizes: whole chunks of 128 while they fit in the
shortest prompt, then chunks of 16 (the last may run up to 15 positions past
it: those slots are overwritten before they are read). A prompt of any length
reuses the same compiled chunks."""


def chunked_prefill(step, tokens, cache, start, chunks=PREFILL_CHUNKS):
    """Fills `cache` with positions `0 ... start - 1` of `tokens`, by chunks.

    Args:
        step: `step(chunk_tokens, cache, begin) -> cache`, the model's cached
            forward pass over the tokens at positions `begin ...`.
        tokens: int (batch, length), `length` static.
        cache: the empty cache.
        start: scalar int32 (a tensor: any value, one program).
        chunks: the chunk sizes, largest first.

    Returns:
        The filled cache.
    """
    length = int(tokens.shape[1])
    start = tf.cast(start, "int32")
    begin = tf.constant(0, "int32")
    for position, size in enumerate(chunks):
        size = min(size, length)
        last = position == len(chunks) - 1

        def cond(begin, cache, size=size, last=last):
            return begin < start if last else begin + size <= start

        def body(begin, cache, size=size):
            first = tf.minimum(begin, length - size)
            chunk = tf.gather(tokens, first + tf.range(size), axis=1)
            return begin + size, step(chunk, cache, first)

        begin, cache = tf.while_loop(cond, body, (begin, cache))
    return cache

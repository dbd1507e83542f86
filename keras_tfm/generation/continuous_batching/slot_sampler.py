"""Per-row sampling for the slots of a batch: each row its own settings.

`sample_tokens` is the one function the slot decoder calls. It adapts the
generation core's sampler (`keras_tfm.generation.sampling.next_tokens`:
per-row tensor settings, randomness hashed from each row's seed and
position) to a slot batch, where every row is at its own position: a row's
token depends on that row alone (its logits, settings, seed and position),
never on the other rows, which is what makes a request's output the same
alone or beside others.
"""

from keras import ops

from keras_tfm.generation.generation_config import seed_word
from keras_tfm.generation.sampling import next_tokens


def sample_tokens(logits, temperature, top_p, seed, position):
    """The next token of each row: greedy where `temperature` is 0.

    Elsewhere the logits are divided by the temperature, the smallest set
    of tokens whose probability reaches `top_p` is kept (nucleus sampling)
    and a token is drawn from it (the Gumbel-max trick, noise hashed from
    the row's seed, position and token ids).

    Args:
        logits: float32 (batch, vocabulary_size).
        temperature, top_p: float32 (batch,).
        seed: int32 (batch,), see `row_seed`.
        position: int32 (batch,): the position of the token sampled, so
            that every step draws new numbers.

    Returns:
        int32 (batch,) token ids.

    Example:
    >>> from keras_tfm.generation.continuous_batching.slot_sampler import sample_tokens
    >>> logits = np.array([[0.0, 3.0, 1.0]], "float32")
    >>> int(sample_tokens(logits, np.zeros(1, "float32"), np.ones(1, "float32"),
    ...                   np.zeros(1, "int32"), np.zeros(1, "int32"))[0])
    1
    """
    zeros = ops.zeros_like(temperature)
    settings = {
        "temperature": temperature,
        "top_p": top_p,
        "top_k": ops.cast(zeros, "int32"),  # off
        "min_p": zeros,  # off
        "seed": seed,
    }
    # (batch, 1): each row's own counter for the random stream.
    return next_tokens(logits, settings, ops.expand_dims(position, 1))


def row_seed(seed):
    """A request's seed (any int) folded into the int32 the sampler takes."""
    return seed_word(seed)

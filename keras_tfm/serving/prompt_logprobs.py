"""The prompt's own log-probabilities, for `echo` with `logprobs`.

lm-evaluation-harness scores a multiple-choice answer by sending the
question and the answer as one prompt with `echo: true, logprobs: 1` and
reading back each prompt token's log-probability under the model, as
OpenAI's legacy completions and vLLM return them: the first token has none
(None: nothing precedes it), token t has

    log p(x_t | x_<t) = log_softmax(logits_{t-1})[x_t]

from one forward pass, the pass `CausalLM.score` makes
(`keras_tfm.generation.scoring`: right-padded to a multiple of 8, float32
logits), so their sum is `score`'s log-likelihood of the prompt. The
alternatives come from the same log-softmax (`keras.ops.top_k`): a token
that is its step's most likely carries exactly its alternative's value,
which lm-eval's "is greedy" test compares with `==`.
"""

import numpy as np
from keras import ops

from keras_tfm.generation import scoring


def prompt_logprobs(model, ids, top_logprobs=0):
    """Each prompt token's log-probability given the tokens before it.

    Args:
        model: a `CausalLM`.
        ids: the prompt's token ids (at most the model's
            `max_sequence_length`).
        top_logprobs: how many of each position's most likely tokens to
            return with it (0: none).

    Returns:
        A list of `(token_id, logprob, alternatives)`, one per prompt
        token: `logprob` None for the first, `alternatives` its most likely
        `(token_id, logprob)` pairs, most likely first ([] for the first
        token, or when `top_logprobs` is 0).

    Example:
    >>> backbone = keras_tfm.models.DecoderBackbone(
    ...     vocabulary_size=50, num_layers=1, num_heads=2, hidden_dim=16,
    ...     intermediate_dim=32, max_sequence_length=16)
    >>> model = keras_tfm.models.CausalLM(backbone)
    >>> scores = prompt_logprobs(model, [5, 6, 7])
    >>> [token for token, _, _ in scores], scores[0][1]
    ([5, 6, 7], None)
    >>> total = sum(logprob for _, logprob, _ in scores[1:])
    >>> bool(abs(total - model.score([[5, 6, 7]])[0][0]) < 1e-4)
    True
    """
    ids = [int(i) for i in ids]
    if len(ids) == 1:
        return [(ids[0], None, [])]
    tokens = scoring.padded(
        [ids], model.fill_id, model.backbone.max_sequence_length, "prompt"
    )
    logits = model(tokens[:, :-1], training=False)
    log_probabilities = ops.log_softmax(ops.cast(logits, "float32"), axis=-1)
    log_probabilities = log_probabilities[0, : len(ids) - 1]  # (positions, V)
    labels = np.asarray(ids[1:], "int32")[:, None]
    chosen = ops.convert_to_numpy(
        ops.take_along_axis(log_probabilities, labels, axis=-1)
    )[:, 0]
    alternatives = [[] for _ in ids[1:]]
    if top_logprobs:
        values, top_ids = ops.top_k(log_probabilities, top_logprobs)
        alternatives = scoring.alternatives(
            ops.convert_to_numpy(top_ids), ops.convert_to_numpy(values)
        )
    scores = [(ids[0], None, [])]
    for token, logprob, pairs in zip(ids[1:], chosen, alternatives, strict=True):
        scores.append((token, float(logprob), pairs))
    return scores

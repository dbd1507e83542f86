"""Models with injected weights whose greedy next token is known in advance.

With hidden_dim = intermediate_dim = 16 and a vocabulary of at most 16 ids:
token t embeds as the unit vector e_t; every attention output projection is
zero, so attention adds nothing; the (pre-LN) feed-forward network maps
relu(LN(e_t)) = c e_t to c k (e_f(t) - e_t), so the hidden state ends as
a e_t + b e_f(t) with b > a, and the tied output projection (logits = h E^T,
after the final norm) puts the largest logit on f(t). The next token is
therefore NEXT[t] at every step, whatever the context, which pins what a
decoding loop must return (stop tokens, prompts of different lengths, beams)
without training.
"""

import numpy as np

WIDTH = 16


def successor(vocabulary_size, padding_id=0):
    """f(t): the next id after t among the non-padding ids, cyclically."""
    ids = [t for t in range(vocabulary_size) if t != padding_id]
    return {t: ids[(i + 1) % len(ids)] for i, t in enumerate(ids)}


def inject(model, vocabulary_size, gain=2.0):
    """Sets `model`'s weights so that greedy decoding follows `successor`."""
    assert vocabulary_size <= WIDTH
    follow = successor(vocabulary_size)
    permutation = np.zeros((WIDTH, WIDTH), "float32")
    for t, f in follow.items():
        permutation[t, f] = 1.0
        permutation[t, t] = -1.0
    rules = {
        "token_embedding/embeddings": lambda shape: np.eye(*shape, dtype="float32"),
        "position_embedding/embeddings": np.zeros,
        "attention_output/kernel": np.zeros,
        "attention_output/bias": np.zeros,
        "feed_forward/intermediate/kernel": lambda shape: np.eye(*shape),
        "feed_forward/intermediate/bias": np.zeros,
        "feed_forward/output/kernel": lambda shape: gain * permutation,
        "feed_forward/output/bias": np.zeros,
    }
    used = set()
    for weight in model.weights:
        for suffix, value in rules.items():
            if weight.path.endswith(suffix):
                weight.assign(np.asarray(value(tuple(weight.shape)), "float32"))
                used.add(suffix)
    optional = {"position_embedding/embeddings"}
    missing = set(rules) - used - optional
    assert not missing, f"no weight path ends with {sorted(missing)}"
    return follow

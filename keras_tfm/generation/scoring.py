"""Log-likelihoods of given texts, and the top-n alternatives of `generate`.

`score` answers "how likely does the model find this text?": for a causal
LM, the sum over each text's tokens after the first of

    log p(x_t | x_<t) = log_softmax(logits_{t-1})[x_t]

(the first token has no context to be predicted from), and how many tokens
that sum covers, so that a perplexity is exp(-log_likelihood / count). For a
sequence-to-sequence model the targets are scored given their sources, every
target token from the start token on. The model's float32 logits come from
one forward pass over the batch (no decoding loop, so nothing to compile),
and their log-softmax is gathered at the labels in-graph; right padding does
not change the scores (the attention is causal, the sources masked).

Example:
>>> check_top_logprobs(3, True, 50)
3
>>> check_top_logprobs(3, False, 50)
Traceback (most recent call last):
...
ValueError: `top_logprobs` needs `return_scores=True` (the alternatives come with the scores). Received: top_logprobs=3, return_scores=False
"""  # noqa: E501

import numpy as np
from keras import ops

from keras_tfm.generation import buffers, token_inputs


def check_top_logprobs(top_logprobs, return_scores, vocabulary_size):
    """`top_logprobs` as an int (0: off); ValueError when out of range or
    without `return_scores`."""
    if top_logprobs is None or (
        top_logprobs == 0 and not isinstance(top_logprobs, bool)
    ):
        return 0
    if (
        isinstance(top_logprobs, bool)
        or not isinstance(top_logprobs, (int, np.integer))
        or not 1 <= top_logprobs <= vocabulary_size
    ):
        raise ValueError(
            f"`top_logprobs` must be None or an integer in [0, {vocabulary_size}] "
            f"(the vocabulary size). Received: top_logprobs={top_logprobs!r}"
        )
    if not return_scores:
        raise ValueError(
            "`top_logprobs` needs `return_scores=True` (the alternatives come "
            f"with the scores). Received: top_logprobs={top_logprobs}, "
            f"return_scores={return_scores}"
        )
    return int(top_logprobs)


def alternatives(ids, values):
    """Per position, the list of `(token_id, log_probability)` pairs of the
    (positions, n) arrays `ids` and `values`."""
    return [
        [(int(i), float(v)) for i, v in zip(row_ids, row_values, strict=True)]
        for row_ids, row_values in zip(ids, values, strict=True)
    ]


def token_log_probabilities(logits, labels):
    """float32 (batch, seq): log_softmax(logits)[labels], in-graph (the
    (batch, seq, V) logits never leave the device)."""
    log_probabilities = ops.log_softmax(ops.cast(logits, "float32"), axis=-1)
    labels = ops.cast(labels, "int32")[..., None]
    return ops.take_along_axis(log_probabilities, labels, axis=-1)[..., 0]


def sums(log_probabilities, counts):
    """`(log_likelihood, counts)`: float64 sums of each row's first `counts`
    entries of the (batch, seq) array, and `counts` as int64."""
    log_probabilities = np.asarray(log_probabilities, "float64")
    kept = np.arange(log_probabilities.shape[1])[None, :] < np.asarray(counts)[:, None]
    return (
        np.where(kept, log_probabilities, 0.0).sum(axis=1),
        np.asarray(counts, "int64"),
    )


def read_rows(model, name, texts):
    """The checked id rows of `texts` (strings need the model's preprocessor)."""
    tokenize = None
    if model.preprocessor is not None:
        tokenize = model.preprocessor.generate_preprocess
    rows, _ = token_inputs.normalize_token_batch(
        name, texts, model.backbone.vocabulary_size, model.backbone.padding_id,
        tokenize,
    )  # fmt: skip
    return rows


def padded(rows, fill_id, maximum, name):
    """Right-padded (batch, length) int32 rows, the length a multiple of 8
    (at most `maximum`)."""
    longest = max(len(row) for row in rows)
    if longest > maximum:
        raise ValueError(
            f"`{name}` holds a sequence of {longest} tokens, past the model's "
            f"max_sequence_length={maximum}: score it in pieces. Received: "
            f"lengths {[len(row) for row in rows]}"
        )
    return token_inputs.pad_rows(
        rows, min(buffers.rounded_length(longest), maximum), fill_id
    )[0]


def score_causal(model, texts):
    """`CausalLM.score`: see the module docstring."""
    rows = read_rows(model, "texts", texts)
    tokens = padded(rows, model.fill_id, model.backbone.max_sequence_length, "texts")

    logits = model(tokens[:, :-1], training=False)
    log_probabilities = token_log_probabilities(logits, tokens[:, 1:])
    return sums(log_probabilities, [len(row) - 1 for row in rows])


def score_seq2seq(model, sources, targets):
    """`Seq2SeqLM.score`: see the module docstring."""
    sources = read_rows(model, "sources", sources)
    targets = read_rows(model, "targets", targets)
    if len(sources) != len(targets):
        raise ValueError(
            "`sources` and `targets` must hold as many sequences. Received: "
            f"{len(sources)} sources and {len(targets)} targets"
        )
    maximum = model.backbone.max_sequence_length
    source = padded(sources, model.fill_id, maximum, "sources")
    start = model.decoder_start_id()
    decoder = [np.concatenate([[start], row]) for row in targets]
    target = padded(decoder, model.fill_id, maximum, "targets")

    inputs = {"source_ids": source, "target_ids": target[:, :-1]}
    log_probabilities = token_log_probabilities(
        model(inputs, training=False), target[:, 1:]
    )
    return sums(log_probabilities, [len(row) for row in targets])

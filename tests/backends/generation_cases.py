"""The generation calls the cross-backend test compares (imported on both).

A tiny decoder-only model (its weights are set by the test: the same arrays
on every backend) and the outputs of `generate` in each mode, as lists of
ints.
"""

PROMPTS = [[5, 6, 7], [9, 3, 4, 8, 2, 11, 12]]
VOCAB = 16
NEW_TOKENS = 10
SAMPLED = {
    "random": dict(sampler="random", temperature=0.8, seed=3),
    "top_k": dict(sampler="top_k", top_k=6, temperature=1.3, seed=4),
    "top_p": dict(sampler="top_p", top_p=0.8, temperature=0.9, seed=5),
    "min_p": dict(sampler="random", min_p=0.1, temperature=1.5, seed=6),
}


def tiny_model():
    from keras_tfm import models

    backbone = models.DecoderBackbone(
        vocabulary_size=VOCAB, num_layers=1, num_heads=2, hidden_dim=16,
        intermediate_dim=16, max_sequence_length=64, dropout=0.0,
        position_encoding="rotary",
    )  # fmt: skip
    return models.CausalLM(backbone)


def _streamed(pieces):
    rows = None
    for step in pieces:
        rows = rows or [[] for _ in step]
        for row, piece in zip(rows, step, strict=True):
            if piece is not None:
                row.append(int(piece))
    return rows


def _ints(rows):
    return [[int(t) for t in row] for row in rows]


def generated(model):
    """Every mode's ids (lists of ints), and greedy's scores (floats)."""
    out = {"greedy": _ints(model.generate(PROMPTS, NEW_TOKENS))}
    out["greedy_streamed"] = _streamed(model.generate(PROMPTS, NEW_TOKENS, stream=True))
    for name, settings in SAMPLED.items():
        out[name] = _ints(model.generate(PROMPTS, NEW_TOKENS, **settings))
    out["top_k_streamed"] = _streamed(
        model.generate(PROMPTS, NEW_TOKENS, stream=True, **SAMPLED["top_k"])
    )
    out["penalties"] = _ints(model.generate(
        PROMPTS, NEW_TOKENS, repetition_penalty=1.3, no_repeat_ngram_size=2,
        presence_penalty=0.5, frequency_penalty=0.2,
    ))  # fmt: skip
    out["stop_id"] = _ints(
        model.generate(PROMPTS, NEW_TOKENS, stop_token_ids=[out["greedy"][0][5]])
    )
    out["beam"] = _ints(
        model.generate(PROMPTS, NEW_TOKENS, sampler="beam", num_beams=2)
    )
    ids, scores, top = model.generate(
        PROMPTS, NEW_TOKENS, return_scores=True, top_logprobs=2
    )
    out["scored"] = _ints(ids)
    out["scores"] = [[float(s) for s in row] for row in scores]
    out["slots"] = slots(model)
    out["prefix_cached"] = prefix_cached(model)
    return out


def slots(model):
    """Continuous batching's slots: a greedy and a sampled request."""
    from keras_tfm.generation.continuous_batching import SlotDecoder

    decoder = SlotDecoder(model, num_slots=2, max_length=32)
    first = [decoder.prefill(0, PROMPTS[0])[0]]
    first.append(decoder.prefill(1, PROMPTS[1], temperature=1.2, seed=8)[0])
    rows, tokens = [[t] for t in first], first
    positions = [len(p) for p in PROMPTS]
    for _ in range(4):
        out, _, _ = decoder.decode(
            tokens, positions, temperature=[0.0, 1.2], seed=[0, 8]
        )
        tokens = [int(t) for t in out[:, 0]]
        positions = [p + 1 for p in positions]
        for row, token in zip(rows, tokens, strict=True):
            row.append(token)
    return rows


PREFIXED = [PROMPTS[1] * 5, (PROMPTS[1] * 5)[:33] + [5, 6]]
"""Two prompts sharing 2 blocks of 16 tokens (the prefix cache's)."""


def prefix_cached(model):
    """Slots after the prefix cache: per prompt of `PREFIXED` (the second
    starts with the first's 2 blocks), the tokens it took from the cache,
    then its first 4 greedy tokens."""
    from keras_tfm.generation.continuous_batching import SlotDecoder

    decoder = SlotDecoder(model, 2, 64, prefix_cache_bytes=1 << 20)
    rows = []
    for slot, prompt in enumerate(PREFIXED):
        first, _, _, cached = decoder.prefill(slot, prompt)
        rows.append([cached, first])
    positions = [len(p) for p in PREFIXED]
    for _ in range(3):
        out, _, _ = decoder.decode([row[-1] for row in rows], positions)
        positions = [p + 1 for p in positions]
        for row, token in zip(rows, out[:, 0], strict=True):
            row.append(int(token))
    return rows

"""Logit processors and warpers against float64 NumPy references (HF's and
OpenAI's definitions, written here independently) on injected logits."""

from collections import Counter

import numpy as np
import pytest
import tensorflow as tf

from keras_tfm.generation import logit_processors, sampling
from keras_tfm.generation.generation_config import (
    GenerationConfig,
    settings_tensors,
)

V = 12
RNG = np.random.default_rng(0)


def ref_repetition(logits, seen, penalty):
    out = logits.copy()
    for t in set(seen):
        out[t] = out[t] / penalty if out[t] > 0 else out[t] * penalty
    return out


def ref_presence_frequency(logits, generated, presence, frequency):
    out = logits.copy()
    for t, c in Counter(generated).items():
        out[t] -= frequency * c + presence
    return out


def ref_no_repeat(logits, seen, n):
    # HF's _get_ngrams / _calc_banned_ngram_tokens, for one row.
    out = logits.copy()
    if n == 0 or len(seen) + 1 < n:
        return out
    grams = {}
    for i in range(len(seen) - n + 1):
        gram = tuple(seen[i : i + n])
        grams.setdefault(gram[:-1], []).append(gram[-1])
    for t in grams.get(tuple(seen[len(seen) - n + 1 :]), []):
        out[t] = -np.inf
    return out


def ref_bad_words(logits, seen, words):
    out = logits.copy()
    for word in words:
        prefix = list(word[:-1])
        if not prefix or (len(seen) >= len(prefix) and seen[-len(prefix) :] == prefix):
            out[word[-1]] = -np.inf
    return out


def ref_processed(logits, seen, generated, config):
    values = config.row_values()
    logits = ref_repetition(logits, seen, values["repetition_penalty"])
    logits = ref_presence_frequency(
        logits, generated, values["presence_penalty"], values["frequency_penalty"]
    )
    logits = ref_no_repeat(logits, seen, values["no_repeat_ngram_size"])
    return ref_bad_words(logits, seen, config.bad_words_ids)


# Rows: (prompt, generated so far, settings); buffers end in fill ids.
ROWS = [
    ([1, 2, 3, 1, 2], [3, 4, 3], dict(repetition_penalty=1.7)),
    ([5, 6], [7, 5, 6, 7, 5], dict(no_repeat_ngram_size=3, presence_penalty=0.6)),
    ([9, 9, 8], [8, 8, 1],
     dict(frequency_penalty=0.4, bad_words_ids=[[8, 1, 4], [2], [1, 11]])),
    ([4, 4, 4, 4], [4, 4], dict(no_repeat_ngram_size=2, repetition_penalty=0.5)),
    ([3], [10, 3], dict(bad_words_ids=[[3, 10], [0, 3, 9]], frequency_penalty=-1.5)),
    ([1, 2, 3, 4, 5, 6, 7, 9], [1, 2, 3, 4, 5, 6, 7], dict(no_repeat_ngram_size=8)),
]  # fmt: skip


def buffers(rows, length=16, fill=0):
    """Each row right-padded: prompt then generated, with the prompt mask.

    The rows are decoded at one index (the longest row's end), as in a
    batch whose rows are all past their prompts."""
    index = max(len(p) + len(g) for p, g, _ in rows)
    tokens = np.full((len(rows), length), fill, "int32")
    mask = np.zeros((len(rows), length), bool)
    for i, (prompt, generated, _) in enumerate(rows):
        text = prompt + generated
        # Left-align so that every row ends at `index`: pad with prompt copies.
        text = [prompt[0]] * (index - len(text)) + text
        tokens[i, :index] = text
        mask[i, : index - len(generated)] = True
    return tokens, mask, index


def test_each_processor_and_their_composition_match_the_references():
    tokens, mask, index = buffers(ROWS)
    configs = [GenerationConfig(**settings) for _, _, settings in ROWS]
    settings = settings_tensors(configs)
    logits = RNG.normal(size=(len(ROWS), V)) * 3
    got = logit_processors.process_logits(
        logits.astype("float32"), tokens, np.int32(index), mask, settings
    ).numpy()
    for i, (_, generated, _) in enumerate(ROWS):
        seen = tokens[i, :index].tolist()
        expected = ref_processed(logits[i], seen, generated, configs[i])
        assert np.array_equal(np.isinf(got[i]), np.isinf(expected)), i
        finite = np.isfinite(expected)
        np.testing.assert_allclose(got[i][finite], expected[finite], rtol=1e-6)
    # Each row's result differs from the raw logits: every processor acted.
    assert all(np.any(got[i] != logits[i].astype("float32")) for i in range(len(ROWS)))


def test_processors_see_only_positions_before_the_index():
    tokens = np.array([[1, 2, 1, 2, 5, 5, 5, 5]], "int32")  # 5s not yet decoded
    mask = np.zeros_like(tokens, bool)
    settings = settings_tensors([GenerationConfig(no_repeat_ngram_size=2)])
    logits = np.zeros((1, V), "float32")
    got = logit_processors.process_logits(logits, tokens, np.int32(4), mask, settings)
    # Last token 2; "2 1" occurred at position 1: 1 is banned, nothing else.
    assert np.isinf(got.numpy()[0]).nonzero()[0].tolist() == [1]


def ref_warped(logits, temperature, top_k, top_p, min_p):
    """HF's TemperatureLogitsWarper, TopK, TopP (ascending cumsum) and MinP."""
    z = logits / temperature
    if top_k:
        kth = np.sort(z)[::-1][min(top_k, len(z)) - 1]
        z = np.where(z < kth, -np.inf, z)
    if top_p < 1.0:
        order = np.argsort(z, kind="stable")
        p = np.exp(z[order] - z.max())
        cumulative = np.cumsum(p / p.sum())
        remove = cumulative <= 1 - top_p
        remove[-1] = False
        z = z.copy()
        z[order[remove]] = -np.inf
    if min_p:
        p = np.exp(z - z.max())
        p /= p.sum()
        z = np.where(p < min_p * p.max(), -np.inf, z)
    return z


@pytest.mark.parametrize(
    "settings",
    [
        dict(sampler="random", temperature=0.7),
        dict(sampler="top_k", top_k=3, temperature=1.3),
        dict(sampler="top_p", top_p=0.6),
        dict(sampler="top_p", top_p=0.9, top_k=6, temperature=0.5),
        dict(sampler="random", min_p=0.2, temperature=2.0),
        dict(sampler="top_p", top_p=0.95, min_p=0.1),
    ],
)
def test_warpers_match_hf_definitions(settings):
    config = GenerationConfig(**settings)
    values = config.row_values()
    logits = RNG.normal(size=(3, V)) * 2
    got = sampling.warp(logits.astype("float32"), settings_tensors([config] * 3))
    for row, warped in zip(logits, got.numpy(), strict=True):
        expected = ref_warped(
            row, values["temperature"], values["top_k"], values["top_p"],
            values["min_p"],
        )  # fmt: skip
        assert np.array_equal(np.isinf(warped), np.isinf(expected))
        finite = np.isfinite(expected)
        np.testing.assert_allclose(warped[finite], expected[finite], rtol=1e-5)


def test_sampling_follows_the_softmax_and_greedy_rows_take_the_argmax():
    logits = np.log(np.array([0.5, 0.3, 0.15, 0.05]))
    n = 6000
    config = GenerationConfig(sampler="random")
    settings = settings_tensors([config] * n, rng=np.random.default_rng(1))
    tokens = sampling.next_tokens(
        np.tile(logits, (n, 1)).astype("float32"), settings, 3
    )
    frequencies = np.bincount(tokens.numpy(), minlength=4) / n
    sigma = np.sqrt(np.exp(logits) * (1 - np.exp(logits)) / n)
    assert np.all(np.abs(frequencies - np.exp(logits)) < 4 * sigma), frequencies
    greedy = settings_tensors([GenerationConfig(), config])
    chosen = sampling.next_tokens(np.tile(logits, (2, 1)).astype("float32"), greedy, 0)
    assert chosen.numpy()[0] == 0


def test_a_row_samples_the_same_alone_and_in_a_batch():
    logits = RNG.normal(size=(3, V)).astype("float32")
    configs = [
        GenerationConfig(sampler="top_p", top_p=0.9, seed=11),
        GenerationConfig(sampler="random", seed=12, temperature=3.0),
        GenerationConfig(),
    ]
    together = sampling.next_tokens(logits, settings_tensors(configs), 7).numpy()
    for i, config in enumerate(configs):
        alone = sampling.next_tokens(logits[i : i + 1], settings_tensors([config]), 7)
        assert alone.numpy()[0] == together[i]
    # Another position draws another number.
    draws = {
        int(sampling.next_tokens(logits[1:2], settings_tensors(configs[1:2]), p)[0])
        for p in range(20)
    }
    assert len(draws) > 3


def test_row_uniform_is_uniform():
    u = sampling.row_uniform(tf.range(64), 5, 1000).numpy()
    assert 0.0 < u.min() and u.max() < 1.0
    assert abs(u.mean() - 0.5) < 0.01 and abs(u.var() - 1 / 12) < 0.005


@pytest.mark.parametrize(
    "settings, match",
    [
        (dict(repetition_penalty=0.0), "repetition_penalty=0.0"),
        (dict(presence_penalty=3.0), "presence_penalty=3.0"),
        (dict(no_repeat_ngram_size=9), "no_repeat_ngram_size=9"),
        (dict(bad_words_ids=[[]]), "bad_words_ids"),
        (dict(bad_words_ids="no"), "bad_words_ids"),
        (dict(min_p=0.1), "`min_p` is not read by sampler='greedy'"),
        (dict(sampler="random", min_p=1.5), "min_p=1.5"),
        (dict(sampler="top_p", temperature=float("nan")), "temperature=nan"),
        (dict(seed=1.5), "seed=1.5"),
        (dict(stop_strings=[""]), "stop_strings"),
    ],
)
def test_bad_settings_raise_value_error(settings, match):
    with pytest.raises(ValueError, match=match):
        GenerationConfig(**settings)

import keras_hub
import numpy as np
import pytest
from keras import ops

from keras_tfm.generation import BeamSearchSampler, make_sampler

STOP, PAD = 2, 0


def markov_next(table):
    """A `next` whose logits depend only on the previous token: log(table[prev])."""
    log_table = ops.convert_to_tensor(np.log(np.asarray(table) + 1e-12), "float32")

    def next(prompt, cache, index):
        previous = ops.take(prompt, index - 1, axis=1)
        return ops.take(log_table, previous, axis=0), None, cache

    return next


def sequence_log_prob(table, tokens, start):
    """Sum of log table[prev, next] over the tokens generated after `start`."""
    pairs = zip(tokens[start - 1 : -1], tokens[start:], strict=True)
    return sum(np.log(table[a][b]) for a, b in pairs)


def run(sampler, next, prompt, index, mask=None, stop_token_ids=None):
    out = sampler(
        next,
        ops.convert_to_tensor(np.asarray(prompt, "int32")),
        index=index,
        mask=None if mask is None else ops.convert_to_tensor(mask),
        stop_token_ids=stop_token_ids,
    )
    return ops.convert_to_numpy(out).tolist()


def test_width_one_equals_keras_hub_greedy():
    rng = np.random.default_rng(0)
    table = rng.dirichlet(np.ones(7), size=7)
    prompt = np.zeros((3, 6), "int32")
    prompt[:, 0] = [1, 4, 6]
    next = markov_next(table)
    greedy = run(keras_hub.samplers.GreedySampler(), next, prompt, 1)
    assert run(BeamSearchSampler(num_beams=1), next, prompt, 1) == greedy


def test_beam_search_finds_the_more_likely_sequence_greedy_misses():
    # From 1: 3 (0.6) then anything (uniform), or 4 (0.4) then 5 (0.99).
    table = np.full((7, 7), 1 / 7)
    table[1] = [0, 0, 0, 0.6, 0.4, 0, 0]
    table[4] = [0.01 / 6] * 5 + [0.99] + [0.01 / 6]
    next = markov_next(table)
    prompt = [[1, 0, 0]]
    greedy = run(keras_hub.samplers.GreedySampler(), next, prompt, 1)
    beam = run(BeamSearchSampler(num_beams=2), next, prompt, 1)
    assert greedy[0][1] == 3
    assert beam == [[1, 4, 5]]
    assert sequence_log_prob(table, beam[0], 1) > sequence_log_prob(table, greedy[0], 1)


def test_length_penalty_trades_likelihood_for_length():
    # From 1: stop (0.5) or 3 (0.5); from 3: 3 again (0.9) or stop (0.1).
    table = np.full((5, 5), 1e-6)
    table[1, [STOP, 3]] = 0.5
    table[3, [3, STOP]] = [0.9, 0.1]
    table[STOP, PAD] = 1.0
    next = markov_next(table)
    prompt = [[1, 0, 0, 0, 0, 0, 0]]
    plain = run(BeamSearchSampler(num_beams=2), next, prompt, 1, stop_token_ids=[STOP])
    # Finished after one token, then padded.
    assert plain == [[1, STOP, PAD, PAD, PAD, PAD, PAD]]
    long = run(
        BeamSearchSampler(num_beams=2, length_penalty=2.0),
        next,
        prompt,
        1,
        stop_token_ids=[STOP],
    )
    assert long == [[1, 3, 3, 3, 3, 3, 3]]


def test_prompt_mask_rows_are_searched_as_if_alone():
    rng = np.random.default_rng(1)
    table = rng.dirichlet(np.ones(6) * 0.3, size=6)
    next = markov_next(table)
    sampler = BeamSearchSampler(num_beams=3, length_penalty=0.6)
    rows = [[5, 1, 4], [2]]
    batch = np.zeros((2, 8), "int32")
    mask = np.zeros((2, 8), bool)
    for i, row in enumerate(rows):
        batch[i, : len(row)] = row
        mask[i, : len(row)] = True
    together = run(sampler, next, batch, 1, mask=mask, stop_token_ids=[STOP])
    for i, row in enumerate(rows):
        alone = np.zeros((1, 8), "int32")
        alone[0, : len(row)] = row
        result = run(sampler, next, alone, len(row), stop_token_ids=[STOP])
        assert together[i] == result[0]
        assert together[i][: len(row)] == row


def test_arguments_are_checked():
    with pytest.raises(ValueError, match="num_beams=0"):
        BeamSearchSampler(num_beams=0)
    with pytest.raises(ValueError, match="length_penalty='long'"):
        BeamSearchSampler(length_penalty="long")
    with pytest.raises(ValueError, match="finite number.*length_penalty=nan"):
        BeamSearchSampler(length_penalty=float("nan"))
    with pytest.raises(ValueError, match="temperature=0"):
        BeamSearchSampler(temperature=0)


def test_make_sampler_names_and_errors():
    assert isinstance(make_sampler("greedy")[0], keras_hub.samplers.GreedySampler)
    assert isinstance(make_sampler("greedy", num_beams=3)[0], BeamSearchSampler)
    top_p, _ = make_sampler("top_p", top_p=0.5, top_k=4, seed=1)
    assert (top_p.p, top_p.k) == (0.5, 4)
    with pytest.raises(ValueError, match="sampler"):
        make_sampler("best")
    with pytest.raises(ValueError, match="top_p=1.5"):
        make_sampler("top_p", top_p=1.5)
    with pytest.raises(ValueError, match="top_k=0"):
        make_sampler("top_k", top_k=0)


def test_sampler_keys_hold_only_what_the_sampler_reads():
    # The key picks the compiled loop: equal where the sampling is the same
    # (a default spelled out is the default)...
    assert make_sampler("random", temperature=1.0)[1] == make_sampler("random")[1]
    assert make_sampler("top_k", top_k=5)[1] == make_sampler("top_k")[1]
    # ... and apart where it differs.
    assert make_sampler("top_p", top_p=0.5)[1] != make_sampler("top_p", top_p=0.9)[1]
    assert make_sampler("top_k", top_k=2)[1] != make_sampler("top_k", top_k=3)[1]
    assert make_sampler("random", temperature=2.0)[1] != make_sampler("random")[1]
    assert make_sampler("beam", num_beams=2)[1] != make_sampler("beam", num_beams=3)[1]


@pytest.mark.parametrize(
    "sampler, settings, unread",
    [
        ("greedy", dict(temperature=0.01), "temperature"),
        ("greedy", dict(top_p=0.5), "top_p"),
        ("greedy", dict(top_k=3), "top_k"),
        ("random", dict(top_p=0.9), "top_p"),
        ("top_k", dict(top_p=0.9), "top_p"),
        ("top_p", dict(length_penalty=1.0), "length_penalty"),
        ("beam", dict(top_k=2, num_beams=2), "top_k"),
    ],
)
def test_a_setting_the_sampler_does_not_read_is_refused(sampler, settings, unread):
    # Issue 37, item 8: silently running greedy with top_p=0.5 is a wrong answer.
    with pytest.raises(ValueError, match=f"`{unread}` is not read by sampler"):
        make_sampler(sampler, **settings)


def test_each_sampler_takes_the_settings_it_reads():
    assert make_sampler("top_p", temperature=0.7, top_p=0.9, top_k=4)[1] == (
        "top_p", 0.7, 0.9, 4,
    )  # fmt: skip
    assert make_sampler("greedy", num_beams=3, length_penalty=1.5)[1] == (
        "beam", 1.0, 3, 1.5,
    )  # fmt: skip

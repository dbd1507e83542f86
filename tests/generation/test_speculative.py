"""Speculative decoding returns greedy decoding's tokens, whatever the drafts."""

import doctest

import keras
import numpy as np
import pytest
from keras import ops

import keras_tfm
from keras_tfm.generation import decoder_steps
from keras_tfm.generation.decoder_steps import DecoderSteps
from keras_tfm.generation.strategies import speculative
from keras_tfm.generation.strategies.speculative import (
    SpeculativeDecoder,
    lookup_drafts,
)
from tests.builders import causal_lm
from tests.generation.uncached import greedy_uncached
from tests.models.injected import WIDTH, inject, successor

VOCAB = 12
K = 3


def injected(vocabulary_size=VOCAB):
    """Greedy next token: successor(vocabulary_size)[t] (tests/models/injected)."""
    model = causal_lm(
        vocabulary_size=VOCAB, num_layers=1, num_heads=2, hidden_dim=WIDTH,
        intermediate_dim=WIDTH, max_sequence_length=64, position_encoding="rotary",
    )  # fmt: skip
    inject(model, vocabulary_size)
    return model


@pytest.fixture(scope="module")
def target():
    return injected()


@pytest.fixture(scope="module")
def lookup(target):
    return SpeculativeDecoder(target, num_draft_tokens=K, jit_compile=False)


def test_lookup_drafts_by_hand():
    tokens = np.array([[1, 2, 3, 9, 1, 2, 3, 4, 5, 1, 2, 3, 0, 0]], "int32")

    def drafts(length, k=4, n=3):
        guesses, found = lookup_drafts(tokens, length, k, n)
        return ops.convert_to_numpy(guesses).tolist(), bool(found)

    # "1 2 3" last matched at 4: what followed (4 5), then periodically.
    assert drafts(12) == ([4, 5, 1, 2], True)
    # "9 1" never occurred before; "1" did, latest at 0: 2 3 9, then 1.
    assert drafts(5, n=2) == ([2, 3, 9, 1], True)
    # No match at all: the last token repeated, and not found.
    assert drafts(3) == ([3, 3, 3, 3], False)


def test_all_drafts_accepted_equals_greedy(target, lookup):
    follow = successor(VOCAB)
    prompt = [1]
    while len(prompt) < VOCAB + 1:  # one full cycle, then it repeats
        prompt.append(follow[prompt[-1]])
    output = target.generate(prompt, 12, draft=lookup)
    assert output == greedy_uncached(target, prompt, 12)
    assert lookup.stats["acceptance_rate"] == 1.0
    assert lookup.stats["rounds"] == 3  # 4 tokens a round for one pass each


def test_no_lookup_match_decodes_one_token_a_round(target, lookup):
    prompt = [3]  # nothing to look up: plain greedy steps
    output = target.generate(prompt, 6, draft=lookup)
    assert output == greedy_uncached(target, prompt, 6)
    assert lookup.stats["drafted"] == 0 and lookup.stats["rounds"] == 6


def test_all_drafts_rejected_equals_greedy(target):
    # With a zero feed-forward the draft's next token is the last one, never
    # the target's successor: every guess is rejected.
    wrong = causal_lm(
        vocabulary_size=VOCAB, num_layers=1, num_heads=2, hidden_dim=WIDTH,
        intermediate_dim=WIDTH, max_sequence_length=64, position_encoding="rotary",
    )  # fmt: skip
    inject(wrong, VOCAB, gain=0.0)
    decoder = SpeculativeDecoder(target, wrong, num_draft_tokens=K, jit_compile=False)
    prompt = [3, 4]
    output = target.generate(prompt, 6, draft=decoder)
    assert output == greedy_uncached(target, prompt, 6)
    assert decoder.stats == dict(
        rounds=6, accepted=0, new_tokens=6, drafted=18, acceptance_rate=0.0
    )


def test_draft_models_partial_full_and_truncated(target):
    # A draft that follows the successor over ids 1..10 agrees with the
    # target except after 10 (it guesses 1, the target says 11).
    partial = SpeculativeDecoder(
        target, draft=injected(VOCAB - 1), num_draft_tokens=K, jit_compile=False
    )
    prompt = [4, 5]
    output = target.generate(prompt, 14, draft=partial)
    assert output == greedy_uncached(target, prompt, 14)
    assert 0 < partial.stats["acceptance_rate"] < 1
    itself = SpeculativeDecoder(
        target, draft=DecoderSteps(target), num_draft_tokens=K, jit_compile=False
    )
    output = target.generate(prompt, 14, draft=itself)
    assert output == greedy_uncached(target, prompt, 14)
    assert itself.stats["acceptance_rate"] == 1.0


def test_random_weights_and_a_truncated_draft_equal_greedy():
    keras.utils.set_random_seed(7)
    model = causal_lm(
        vocabulary_size=40, num_layers=2, num_heads=4, num_key_value_heads=2,
        hidden_dim=32, intermediate_dim=64, max_sequence_length=96,
        position_encoding="rotary", normalization="rms_norm", use_bias=False,
    )  # fmt: skip
    draft = DecoderSteps(model, num_layers=1)  # its first block and head
    decoder = SpeculativeDecoder(model, draft, num_draft_tokens=4, jit_compile=False)
    prompts = [[5, 9, 12, 5, 9, 30, 2, 5, 9], [17, 3]]
    outputs = model.generate(prompts, 20, stop_token_ids=[8], draft=decoder)
    assert outputs == [greedy_uncached(model, p, 20, (8,)) for p in prompts]
    assert decoder.stats["drafted"] == 4 * decoder.stats["rounds"]


def test_partly_accepted_lookup_stops_at_the_stop_token(target):
    prompt = [1, 2, 3, 4, 1, 2]  # guesses 3 4 1 after "1 2": two accepted
    stopped = SpeculativeDecoder(target, num_draft_tokens=K, jit_compile=False)
    output = target.generate(prompt, 10, stop_token_ids=[5], draft=stopped)
    assert output == prompt + [3, 4, 5]
    assert stopped.stats == dict(
        rounds=1, accepted=2, new_tokens=3, drafted=3, acceptance_rate=2 / 3
    )


def test_bad_arguments_are_refused(target):
    with pytest.raises(ValueError, match="draft='medusa'"):
        SpeculativeDecoder(target, draft="medusa")
    other = causal_lm(
        vocabulary_size=20, num_layers=1, num_heads=2, hidden_dim=8,
        intermediate_dim=16, max_sequence_length=16,
    )  # fmt: skip
    with pytest.raises(ValueError, match="vocabulary_size is 20"):
        SpeculativeDecoder(target, draft=other)
    with pytest.raises(ValueError, match="num_draft_tokens"):
        SpeculativeDecoder(target, num_draft_tokens=0)
    with pytest.raises(ValueError, match="num_layers=2"):
        DecoderSteps(target, num_layers=2)
    with pytest.raises(ValueError, match="plain greedy"):
        target.generate([1, 2], 4, sampler="top_k", draft="prompt_lookup")
    with pytest.raises(ValueError, match="max_sequence_length=64"):
        target.generate([1, 2], 62, draft=SpeculativeDecoder(target))


@pytest.mark.parametrize(
    "module", [decoder_steps, speculative], ids=lambda m: m.__name__
)
def test_docstring_examples(module):
    # The SpeculativeDecoder example runs the XLA-compiled loop.
    result = doctest.testmod(
        module, extraglobs={"np": np, "ops": ops, "keras_tfm": keras_tfm}
    )
    assert result.attempted > 0 and result.failed == 0


@pytest.mark.parametrize("chunk_lengths", [(4, 4), (8, 2)])
def test_extend_in_chunks_equals_one_pass(chunk_lengths):
    keras.utils.set_random_seed(5)
    model = causal_lm(
        vocabulary_size=30, num_layers=2, num_heads=2, hidden_dim=16,
        intermediate_dim=32, max_sequence_length=16, position_encoding="rotary",
    )  # fmt: skip
    steps = DecoderSteps(model)
    tokens = np.random.default_rng(0).integers(1, 30, size=(1, 16))
    _, expected = steps(tokens[:, :13], steps.empty_cache(1, 16), 0)
    caches = steps.extend(tokens, steps.empty_cache(1, 16), 0, 13, chunk_lengths)
    for cache, reference in zip(caches, expected, strict=True):
        np.testing.assert_allclose(
            ops.convert_to_numpy(cache)[:, :, :13],
            ops.convert_to_numpy(reference)[:, :, :13],
            atol=1e-5,
        )


def test_generate_takes_a_draft_by_name_or_model_and_keeps_its_decoder():
    keras.utils.set_random_seed(3)
    shape = dict(
        vocabulary_size=30, num_layers=1, num_heads=2, hidden_dim=16,
        intermediate_dim=32, max_sequence_length=64,
    )  # fmt: skip
    model, other = causal_lm(**shape), causal_lm(**shape)
    prompt = [1, 2, 3, 4, 1, 2]
    reference = greedy_uncached(model, prompt, 8)
    assert model.generate(prompt, 8, draft="prompt_lookup") == reference
    assert model.generate(prompt, 8, draft=other) == reference
    loops = len(model.compiled_loops)
    assert model.generate(prompt, 8, draft=other) == reference
    assert len(model.compiled_loops) == loops  # the decoder and its loop reused

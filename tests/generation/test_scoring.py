"""`score` and `generate(..., top_logprobs=n)` against float64 NumPy passes."""

import math

import numpy as np
import pytest

from tests.builders import seq2seq_lm
from tests.layers.numpy_reference import feed_forward, layer_norm
from tests.models.test_causal_lm import VOCAB, injected


def model_and_reference():
    """The injected model (its attention adds nothing: each position's logits
    depend on its own token only), with random norms and feed-forward biases
    so that the logits are uneven, and its float64 NumPy forward pass:
    `reference[t]` is log_softmax of the logits after token t."""
    model, _ = injected()
    rng = np.random.default_rng(0)
    weights = {}
    for weight in model.weights:
        if weight.path.endswith(("gamma", "beta", "intermediate/bias", "output/bias")):
            if "attention" not in weight.path:
                scale = 1.0 if weight.path.endswith("gamma") else 0.0
                weight.assign(scale + rng.normal(0, 0.5, weight.shape))
        weights[weight.path] = np.asarray(weight.numpy(), "float64")

    def w(name):
        return weights[f"transformer_layer_0/{name}"]

    assert not w("self_attention/attention_output/kernel").any()
    assert not w("self_attention/attention_output/bias").any()
    epsilon = model.backbone.layer_norm_epsilon
    x = weights["token_embedding/embeddings"]  # (V, D): every token at once
    normed = layer_norm(
        x, w("feed_forward_norm/gamma"), w("feed_forward_norm/beta"), epsilon
    )
    x = x + feed_forward(
        normed,
        w("feed_forward/intermediate/kernel"),
        w("feed_forward/intermediate/bias"),
        w("feed_forward/output/kernel"),
        w("feed_forward/output/bias"),
        "gelu",
    )
    x = layer_norm(x, weights["final_norm/gamma"], weights["final_norm/beta"], epsilon)
    logits = x @ weights["token_embedding/embeddings"].T  # tied: h E^T
    logits -= logits.max(-1, keepdims=True)
    return model, logits - np.log(np.exp(logits).sum(-1, keepdims=True))


@pytest.fixture(scope="module")
def scored():
    return model_and_reference()


def test_score_sums_the_log_probabilities_of_every_token_after_the_first(scored):
    model, reference = scored
    texts = [[3, 9, 8, 3, 4], [6], [2, 2, 7]]
    log_likelihood, count = model.score(texts)
    expected = [
        sum(reference[a, b] for a, b in zip(t[:-1], t[1:], strict=True))
        for t in texts
    ]
    np.testing.assert_allclose(log_likelihood, expected, rtol=1e-5, atol=1e-5)
    assert count.tolist() == [4, 0, 2]
    # Alone, a text scores what it scores beside longer ones (right padding).
    np.testing.assert_allclose(model.score(texts[2])[0], log_likelihood[2:], atol=1e-6)


def test_top_logprobs_are_the_model_distribution_at_each_new_token(scored):
    model, reference = scored
    prompts = [[3, 9, 8], [5]]
    for options in ({}, {"sampler": "random", "seed": 4, "temperature": 2.0}):
        outputs, scores, top = model.generate(
            prompts, 4, return_scores=True, top_logprobs=3, **options
        )
        for prompt, row, row_scores, row_top in zip(
            prompts, outputs, scores, top, strict=True
        ):
            assert len(row_top) == len(row_scores) == len(row) - len(prompt) == 4
            for i, alternatives in enumerate(row_top):
                previous, chosen = row[len(prompt) + i - 1], row[len(prompt) + i]
                expected_ids = np.argsort(-reference[previous], kind="stable")[:3]
                assert [t for t, _ in alternatives] == expected_ids.tolist()
                np.testing.assert_allclose(
                    [v for _, v in alternatives],
                    reference[previous, expected_ids],
                    atol=1e-5,
                )
                assert math.isclose(
                    row_scores[i], reference[previous, chosen], abs_tol=1e-5
                )


def test_greedy_takes_the_first_alternative_and_the_checks(scored):
    model, _ = scored
    # The same batch and buffer as above: the compiled loop is reused.
    outputs, _, top = model.generate(
        [[4, 5], [6]], 2, return_scores=True, top_logprobs=3
    )
    for output, steps in zip(outputs, top, strict=True):
        assert [step[0][0] for step in steps] == output[-2:]
    with pytest.raises(ValueError, match="needs `return_scores=True`"):
        model.generate([4], 2, top_logprobs=2)
    with pytest.raises(ValueError, match=rf"\[0, {VOCAB}\].*top_logprobs=13"):
        model.generate([4], 2, return_scores=True, top_logprobs=VOCAB + 1)
    with pytest.raises(ValueError, match="past the model's max_sequence_length=16"):
        model.score([[1] * 17])


def test_seq2seq_score_is_the_targets_log_likelihood_given_the_source():
    model = seq2seq_lm(
        vocabulary_size=20, num_encoder_layers=1, num_decoder_layers=1,
        num_heads=2, hidden_dim=16, intermediate_dim=32, max_sequence_length=16,
        start_token_id=1,
    )  # fmt: skip
    sources, targets = [[3, 4, 5], [6]], [[7, 8], [9, 10, 11]]
    log_likelihood, count = model.score(sources, targets)
    assert count.tolist() == [2, 3]
    for source, target, value in zip(sources, targets, log_likelihood, strict=True):
        decoder = np.array([[1] + target[:-1]])
        logits = np.asarray(
            model({"source_ids": np.array([source]), "target_ids": decoder}), "float64"
        )[0]
        logits -= logits.max(-1, keepdims=True)
        log_softmax = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
        expected = sum(log_softmax[i, t] for i, t in enumerate(target))
        assert math.isclose(value, expected, abs_tol=1e-5)
    with pytest.raises(ValueError, match="as many sequences.*2 sources and 1"):
        model.score(sources, targets[:1])

"""`generate` on JAX gives TensorFlow's tokens: greedy, sampled, beam, streamed.

The engine's loops are `keras.ops` (`keras_tfm.generation`), compiled by
`jax.jit` on JAX and by an XLA `tf.function` on TensorFlow. The same tiny
model (the injected weights of tests/models/injected.py, whose greedy next
token is known: `successor`; saved by this process) generates in every mode here
on TensorFlow and in a subprocess on JAX with TensorFlow blocked; the ids
must be equal (the sampler's random stream is a hash of the row's seed, the
position and the token id: the same uint32 arithmetic on both), and the
log-probabilities equal within float32 rounding (two XLA builds may sum in
another order).
"""

import json

import keras
import numpy as np
import pytest

from tests.backends import generation_cases as cases
from tests.backends.test_without_tensorflow import HERE, run_jax
from tests.models.injected import inject


@pytest.mark.skipif(
    keras.backend.backend() != "tensorflow", reason="compares JAX with TensorFlow"
)
def test_generate_on_jax_equals_tensorflow(tmp_path):
    model = cases.tiny_model()
    follow = inject(model, cases.VOCAB)
    weights = model.get_weights()
    expected = cases.generated(model)
    for prompt, row in zip(cases.PROMPTS, expected["greedy"], strict=True):
        greedy = list(prompt)
        for _ in range(cases.NEW_TOKENS):
            greedy.append(follow[greedy[-1]])
        assert row == greedy
    # Sampling leaves the greedy path (the comparison below means something).
    for mode in cases.SAMPLED:
        assert expected[mode] != expected["greedy"], mode
    assert expected["slots"][0] == expected["greedy"][0][3:8]
    prefixed = zip(cases.PREFIXED, expected["prefix_cached"], (0, 32), strict=True)
    for prompt, row, cached in prefixed:
        greedy = list(prompt)
        for _ in range(4):
            greedy.append(follow[greedy[-1]])
        assert row == [cached, *greedy[len(prompt) :]]

    np.savez(tmp_path / "weights.npz", **{f"w{i}": w for i, w in enumerate(weights)})
    run_jax(HERE / "jax_generation.py", tmp_path / "weights.npz", tmp_path / "out.json")
    with open(tmp_path / "out.json") as file:
        got = json.load(file)

    assert sorted(got) == sorted(expected)
    for mode in expected:
        if mode == "scores":
            np.testing.assert_allclose(got[mode], expected[mode], atol=1e-5)
        else:
            assert got[mode] == expected[mode], mode

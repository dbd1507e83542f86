"""Per-row sampling of the slots: each row's settings, seed and position."""

import numpy as np

from keras_tfm.generation.continuous_batching.slot_sampler import sample_tokens

PROBABILITIES = np.array([0.5, 0.3, 0.2])


def draw(rows, temperature, top_p, seeds, positions):
    logits = np.log(np.tile(PROBABILITIES, (rows, 1))).astype("float32")
    return np.asarray(
        sample_tokens(
            logits,
            np.full(rows, temperature, "float32"),
            np.full(rows, top_p, "float32"),
            np.asarray(seeds, "int32"),
            np.asarray(positions, "int32"),
        )  # fmt: skip
    )


def test_frequencies_follow_the_nucleus():
    rows = 20000
    seeds = np.arange(rows)
    frequencies = np.bincount(draw(rows, 1.0, 1.0, seeds, seeds % 7), minlength=3)
    np.testing.assert_allclose(frequencies / rows, PROBABILITIES, atol=0.015)
    # top_p = 0.6 keeps {0.5, 0.3} (the mass above the third is 0.8 >= 0.6),
    # renormalised: 0.625 and 0.375.
    frequencies = np.bincount(draw(rows, 1.0, 0.6, seeds, seeds % 7), minlength=3)
    np.testing.assert_allclose(frequencies / rows, [0.625, 0.375, 0.0], atol=0.015)


def test_a_row_draws_the_same_alone_or_in_any_batch():
    seeds, positions = np.arange(64) * 7919, np.arange(64) * 3 + 1
    together = draw(64, 1.0, 1.0, seeds, positions)
    for i in (0, 17, 63):
        assert (
            draw(1, 1.0, 1.0, seeds[i : i + 1], positions[i : i + 1])[0]
            == (together[i])
        )
    # A new position draws new numbers (not all 64 rows repeat).
    assert (draw(64, 1.0, 1.0, seeds, positions + 1) != together).any()


def test_temperature_zero_is_the_argmax():
    assert (draw(8, 0.0, 1.0, np.arange(8), np.arange(8)) == 0).all()

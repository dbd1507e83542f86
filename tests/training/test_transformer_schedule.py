import keras
import numpy as np
import pytest

from keras_tfm.training import TransformerSchedule


def paper_rate(step, d_model, warmup):
    return d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def test_matches_the_paper_formula_with_steps_counted_from_one():
    schedule = TransformerSchedule(hidden_dim=512, warmup_steps=4000)
    for iteration in [0, 1, 999, 3998, 3999, 4000, 10_000, 100_000]:
        expected = paper_rate(iteration + 1, 512, 4000)
        np.testing.assert_allclose(float(schedule(iteration)), expected, rtol=1e-6)


def test_warms_up_linearly_peaks_at_warmup_then_decays():
    schedule = TransformerSchedule(hidden_dim=64, warmup_steps=10, scale=2.0)
    rates = np.array([float(schedule(i)) for i in range(40)])
    assert np.argmax(rates) == 9  # the paper's step 10
    np.testing.assert_allclose(rates[:10], rates[0] * np.arange(1, 11), rtol=1e-5)
    assert np.all(np.diff(rates[10:]) < 0)
    np.testing.assert_allclose(rates[9], 2.0 * (64 * 10) ** -0.5, rtol=1e-6)


def test_drives_an_optimizer_and_round_trips_its_config():
    schedule = TransformerSchedule(hidden_dim=32, warmup_steps=5, scale=0.5)
    optimizer = keras.optimizers.Adam(schedule)
    variable = keras.Variable(np.ones(3, "float32"))
    optimizer.apply_gradients([(np.ones(3, "float32"), variable)])
    np.testing.assert_allclose(
        float(optimizer.learning_rate), float(schedule(1)), rtol=1e-6
    )
    restored = keras.saving.deserialize_keras_object(
        keras.saving.serialize_keras_object(schedule)
    )
    assert isinstance(restored, TransformerSchedule)
    assert restored.get_config() == schedule.get_config()
    config = keras.optimizers.Adam.from_config(optimizer.get_config()).get_config()
    assert config["learning_rate"]["config"] == schedule.get_config()


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"hidden_dim": 0}, "hidden_dim"),
        ({"hidden_dim": 8, "warmup_steps": 2.5}, "warmup_steps"),
        ({"hidden_dim": 8, "scale": -1.0}, "scale"),
    ],
)
def test_rejects_bad_arguments(kwargs, name):
    with pytest.raises(ValueError, match=name):
        TransformerSchedule(**kwargs)

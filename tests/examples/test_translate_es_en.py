"""examples/translate_es_en.py: the wall-clock learning-rate schedule."""

import math
import types
from pathlib import Path

import keras
import pytest

from tests.examples import load_example_module

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "translate_es_en.py"


def load_example():
    return load_example_module("translate_es_en")


@pytest.fixture(scope="module")
def example():
    return load_example()


@pytest.mark.parametrize(
    "step, spent", [(0, 0.0), (49, 0.0), (99, 0.25), (500, 0.5), (500, 0.9), (7, 1.0)]
)
def test_the_rate_warms_up_by_steps_and_decays_by_the_budget_spent(
    example, step, spent
):
    schedule = example.WallClockCosine(2e-3, warmup_steps=100, minutes=60)
    schedule.spent.assign(spent)
    # Linear warm-up over the first 100 steps, times a cosine in the share
    # of the wall-clock budget spent (float64 reference).
    expected = 2e-3 * min(1.0, (step + 1) / 100) * 0.5 * (1 + math.cos(math.pi * spent))
    assert float(schedule(step)) == pytest.approx(expected, rel=1e-5, abs=1e-9)


def test_training_stops_after_the_step_that_spends_the_budget(example, monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(example.time, "time", lambda: now[0])
    schedule = example.WallClockCosine(1e-2, warmup_steps=1, minutes=1)
    budget = example.SpendBudget(schedule)
    optimizer = types.SimpleNamespace(iterations=keras.Variable(0))
    model = types.SimpleNamespace(stop_training=False, optimizer=optimizer)
    budget.set_model(model)
    budget.on_train_begin()
    seen = []
    while not model.stop_training:  # Keras's loop: each step takes 15 s here
        budget.on_train_batch_begin(len(seen))
        seen.append(float(schedule.spent.numpy()))
        now[0] += 15.0
        model.optimizer.iterations.assign_add(1)
        budget.on_train_batch_end(len(seen) - 1)
    # The budget of 60 s is spent by the 4th step, which ends training; the
    # schedule saw the fractions 0, 1/4, 2/4, 3/4.
    assert seen == [0.0, 0.25, 0.5, 0.75]

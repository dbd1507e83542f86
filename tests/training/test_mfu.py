"""MFU is never shown above 100%: an impossible ratio means the peak was
underestimated, and the peak is measured as the best of several runs."""

import math
import re

import keras
import numpy as np
import pytest

from keras_tfm.training import ThroughputCallback, measure_peak_flops
from keras_tfm.training.flops import format_mfu, model_flops_utilization


def test_utilization_is_the_ratio_when_possible():
    assert model_flops_utilization(5e10, 2e11) == 0.25
    assert model_flops_utilization(2e11, 2e11) == 1.0
    assert format_mfu(5e10, 2e11) == "MFU 25.00% of a 2e+11 FLOP/s peak"


@pytest.mark.parametrize("achieved", [2.0000001e11, 4e11, 1e15])
def test_a_low_peak_is_reported_as_underestimated(achieved):
    assert math.isnan(model_flops_utilization(achieved, 2e11))
    text = format_mfu(achieved, 2e11)
    assert "underestimated" in text and "2e+11 FLOP/s peak" in text
    assert not re.search(r"\d+(\.\d+)?%", text)


def test_no_printed_mfu_exceeds_100_percent():
    rng = np.random.default_rng(0)
    for achieved, peak in 10.0 ** rng.uniform(6, 14, size=(200, 2)):
        match = re.search(r"MFU ([\d.]+)%", format_mfu(achieved, peak))
        assert (match is None) == (achieved > peak)
        if match:
            assert float(match.group(1)) <= 100.0


def test_bad_peaks_are_refused():
    for peak in (0, -1.0, None):
        with pytest.raises(ValueError, match="peak_flops"):
            model_flops_utilization(1e9, peak)


def test_the_peak_is_the_best_of_the_timed_runs(monkeypatch):
    # Fake clock: three runs of 3 s, 1 s and 2 s; the 1 s run is the peak.
    ticks = iter([0.0, 3.0, 10.0, 11.0, 20.0, 22.0])
    monkeypatch.setattr("keras_tfm.training.flops._clock", lambda: next(ticks))
    flops = measure_peak_flops(matrix_size=64, num_iterations=5, num_repeats=3)
    assert flops == 2 * 64**3 * 5 / 1.0
    with pytest.raises(ValueError, match="num_repeats"):
        measure_peak_flops(num_repeats=0)


def tiny_model():
    model = keras.Sequential(
        [keras.Input((8,), dtype="int32"), keras.layers.Embedding(11, 16)]
    )
    model.add(keras.layers.Dense(11))
    model.compile("adam", "sparse_categorical_crossentropy")
    return model


def test_callback_with_a_deliberately_low_peak(capsys):
    x = np.random.default_rng(0).integers(0, 11, size=(16, 8))
    callback = ThroughputCallback(tokens_per_step=4 * 8, peak_flops=1.0)
    history = tiny_model().fit(
        x, x, batch_size=4, epochs=2, callbacks=[callback], verbose=0
    )
    # Hundreds of tokens/s times 6 * 363 FLOPs per token exceed 1 FLOP/s.
    assert all(t > 0 for t in history.history["tokens_per_second"])
    assert all(math.isnan(m) for m in history.history["mfu"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 2 and all("underestimated" in line for line in lines)
    assert not re.search(r"MFU [\d.]+%", "\n".join(lines))


def test_step_logs_carry_the_running_rate_for_the_progress_bar(monkeypatch):
    clock = iter(range(100))  # one fake second per clock read
    monkeypatch.setattr(
        "keras_tfm.training.throughput_callback._clock", lambda: next(clock)
    )
    seen = []

    class Record(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            seen.append((logs or {}).get("tokens_per_second"))

    x = np.zeros((12, 8), "int32")
    callback = ThroughputCallback(tokens_per_step=32, peak_flops=1e12, verbose=0)
    tiny_model().fit(
        x, x, batch_size=4, epochs=1, callbacks=[callback, Record()], verbose=0
    )
    # Clock: epoch begin 0, steps end at 1, 2, 3: 32 tokens per second after
    # the first step; the first step has no rate yet.
    assert seen == [None, 32.0, 32.0]

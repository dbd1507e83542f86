import keras
import numpy as np
import pytest

from keras_tfm.training import (
    ThroughputCallback,
    TokenCount,
    TokenCrossEntropy,
    training_flops_per_token,
)

rng = np.random.default_rng(0)
BATCH, SEQ, VOCAB = 4, 8, 11


def data(num_batches=3):
    x = rng.integers(1, VOCAB, size=(BATCH * num_batches, SEQ))
    lengths = rng.integers(2, SEQ + 1, size=len(x))
    x[np.arange(SEQ)[None, :] >= lengths[:, None]] = 0
    return x, x


def model():
    m = keras.Sequential(
        [
            keras.Input((SEQ,), dtype="int32"),
            keras.layers.Embedding(VOCAB, 16),
            keras.layers.Dense(VOCAB),
        ]
    )
    m.compile("adam", TokenCrossEntropy(), metrics=[TokenCount()])
    return m


def test_token_count_metric_counts_real_tokens():
    count = TokenCount()
    assert float(count(np.array([[5, 6, 0], [7, 0, 0]]), None)) == 3.0
    assert float(TokenCount(ignore_class=None)(np.zeros((2, 3)), None)) == 6.0
    m = model()
    x, y = data()
    logs = m.evaluate(x, y, batch_size=BATCH, return_dict=True, verbose=0)
    assert logs["num_tokens"] == (y != 0).sum()


def test_reports_real_tokens_per_second_and_mfu(capsys):
    m = model()
    x, y = data(num_batches=4)
    flops = training_flops_per_token(m.count_params(), 0, 0, 0)
    callback = ThroughputCallback(token_count_metric="num_tokens", peak_flops=1e9)
    history = m.fit(x, y, batch_size=BATCH, epochs=2, callbacks=[callback], verbose=0)
    tps = history.history["tokens_per_second"]
    mfu = history.history["mfu"]
    assert len(tps) == 2 and all(t > 0 for t in tps)
    # Default FLOPs per token are 6 * parameters.
    np.testing.assert_allclose(mfu, np.array(tps) * flops / 1e9, rtol=1e-9)
    assert "tokens/s (real tokens), MFU" in capsys.readouterr().out


def test_real_token_count_excludes_the_first_step_and_padding(monkeypatch):
    """With a fake clock of 1 s per step, tokens/s is the real tokens after step 1."""
    clock = iter(range(100))
    monkeypatch.setattr(
        "keras_tfm.training.throughput_callback._clock", lambda: next(clock)
    )
    m = model()
    x, y = data(num_batches=3)
    callback = ThroughputCallback(
        token_count_metric="num_tokens", flops_per_token=10.0, peak_flops=1e3, verbose=0
    )
    history = m.fit(
        x, y, batch_size=BATCH, epochs=1, shuffle=False, callbacks=[callback], verbose=0
    )
    later_tokens = (y[BATCH:] != 0).sum()
    # perf_counter: epoch begin 0, step ends 1, 2, 3: two seconds after step 1.
    assert history.history["tokens_per_second"][0] == pytest.approx(later_tokens / 2)
    assert history.history["mfu"][0] == pytest.approx(later_tokens / 2 * 10 / 1e3)


def test_tokens_per_step_counts_all_positions(monkeypatch):
    clock = iter(range(100))
    monkeypatch.setattr(
        "keras_tfm.training.throughput_callback._clock", lambda: next(clock)
    )
    m = model()
    x, y = data(num_batches=1)
    callback = ThroughputCallback(
        tokens_per_step=BATCH * SEQ, flops_per_token=1.0, peak_flops=1.0, verbose=0
    )
    history = m.fit(x, y, batch_size=BATCH, epochs=1, callbacks=[callback], verbose=0)
    # A single step is timed from the epoch start: 1 fake second.
    assert history.history["tokens_per_second"][0] == BATCH * SEQ


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
def test_measures_peak_in_the_compute_dtype_when_not_given(monkeypatch, policy):
    dtypes = []

    def measure(dtype):
        dtypes.append(dtype)
        return 5e10

    monkeypatch.setattr(
        "keras_tfm.training.throughput_callback.measure_peak_flops", measure
    )
    keras.config.set_dtype_policy(policy)
    m = model()
    keras.config.set_dtype_policy("float32")
    x, y = data(num_batches=2)
    callback = ThroughputCallback(tokens_per_step=BATCH * SEQ, verbose=0)
    m.fit(x, y, batch_size=BATCH, epochs=1, callbacks=[callback], verbose=0)
    assert callback._peak == 5e10
    assert dtypes == [keras.dtype_policies.get(policy).compute_dtype]


def test_errors():
    with pytest.raises(ValueError, match="exactly one"):
        ThroughputCallback()
    with pytest.raises(ValueError, match="exactly one"):
        ThroughputCallback(tokens_per_step=8, token_count_metric="num_tokens")
    with pytest.raises(ValueError, match="peak_flops"):
        ThroughputCallback(tokens_per_step=8, peak_flops=0)
    m = model()
    x, y = data(num_batches=1)
    callback = ThroughputCallback(token_count_metric="tokens", peak_flops=1.0)
    with pytest.raises(ValueError, match="num_tokens"):
        m.fit(x, y, batch_size=BATCH, callbacks=[callback], verbose=0)

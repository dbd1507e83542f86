import keras
import pytest

from keras_tfm.training import flops, measure_peak_flops, training_flops_per_token


def test_palm_formula():
    assert training_flops_per_token(1000, 2, 16, 8) == 6 * 1000 + 12 * 2 * 8 * 16
    assert training_flops_per_token(1000, 0, 0, 0) == 6000


@pytest.mark.parametrize("name", ["num_parameters", "num_layers", "hidden_dim"])
def test_rejects_bad_counts(name):
    args = {"num_parameters": 10, "num_layers": 1, "hidden_dim": 4}
    args[name] = -1
    with pytest.raises(ValueError, match=name):
        training_flops_per_token(sequence_length=4, **args)
    with pytest.raises(ValueError, match="sequence_length"):
        training_flops_per_token(10, 1, 4, 2.5)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_counts_the_flops_of_the_timed_matmuls(dtype, monkeypatch):
    # What is counted, not how fast this machine is: the timed products are
    # num_iterations matmuls of (n, n) by (n, n) in `dtype`, 2 n^3 FLOPs each
    # (n^2 outputs, each n multiplies and n adds), over the clock's seconds.
    n, iterations, seconds = 64, 3, 0.25
    products = []
    matmul = keras.ops.matmul

    def counting_matmul(a, b):
        dtypes = (
            keras.backend.standardize_dtype(a.dtype),
            keras.backend.standardize_dtype(b.dtype),
        )
        products.append((tuple(a.shape), tuple(b.shape), *dtypes))
        return matmul(a, b)

    # Two timed runs; the faster one counts.
    clock = iter([10.0, 10.0 + 2 * seconds, 20.0, 20.0 + seconds])
    monkeypatch.setattr(keras.ops, "matmul", counting_matmul)
    monkeypatch.setattr(flops, "_clock", lambda: next(clock))
    rate = measure_peak_flops(
        matrix_size=n, num_iterations=iterations, dtype=dtype, num_repeats=2
    )
    assert products == [((n, n), (n, n), dtype, dtype)] * (2 + 2 * iterations)
    assert rate == pytest.approx(iterations * 2 * n**3 / seconds)


def test_measures_a_positive_rate_and_checks_its_arguments():
    assert measure_peak_flops(matrix_size=32, num_iterations=2) > 0
    with pytest.raises(ValueError, match="matrix_size"):
        measure_peak_flops(matrix_size=0)
    with pytest.raises(ValueError, match="num_iterations"):
        measure_peak_flops(num_iterations=0)

import pytest

from keras_tfm.training import measure_peak_flops, training_flops_per_token


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
def test_measures_a_plausible_cpu_rate(dtype):
    flops = measure_peak_flops(matrix_size=128, num_iterations=3, dtype=dtype)
    # Any machine running this manages more than 10 MFLOP/s and under 10 PFLOP/s.
    assert 1e7 < flops < 1e16
    with pytest.raises(ValueError, match="matrix_size"):
        measure_peak_flops(matrix_size=0)

"""Model FLOPs per token and the device's peak FLOP/s, for MFU."""

import math
import time

import keras
import numpy as np
from keras import ops

from keras_tfm.validation import check_positive_float, check_positive_int

_clock = time.perf_counter  # a seam for tests


def _check_count(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise ValueError(
            f"`{name}` must be a non-negative integer. Received: {name}={value!r}"
        )
    return int(value)


def training_flops_per_token(num_parameters, num_layers, hidden_dim, sequence_length):
    """Model FLOPs of one training step (forward + backward) per token.

        flops = 6 * N + 12 * num_layers * sequence_length * hidden_dim

    (Chowdhery et al., 2022, PaLM, appendix B). `6N` counts the weight
    matmuls: 2N forward, 4N backward. The second term counts the attention
    score and value matmuls, `QK^T` and `AV`, which have no parameters
    (hidden_dim = heads * head_dim). No causal discount is applied, and
    rematerialisation is not counted: this is *model* FLOPs, the numerator of
    MFU. Pass 0 for the attention sizes to drop the attention term.

    Args:
        num_parameters: N, e.g. `model.count_params()` (an embedding table tied
            to the output projection is a matmul and belongs in N).
        num_layers: the number of attention layers.
        hidden_dim: the attention width, heads * head_dim.
        sequence_length: the training sequence length.

    Returns:
        FLOPs per token, an int.

    Example:
    >>> training_flops_per_token(124_000_000, 12, 768, 1024)
    857246208
    """
    n = _check_count("num_parameters", num_parameters)
    layers = _check_count("num_layers", num_layers)
    hidden = _check_count("hidden_dim", hidden_dim)
    seq = _check_count("sequence_length", sequence_length)
    return 6 * n + 12 * layers * seq * hidden


def measure_peak_flops(
    matrix_size=2048, num_iterations=4, dtype="float32", num_repeats=3
):
    """Measures the device's dense matmul throughput, in FLOP/s.

    Times `num_repeats` runs of `num_iterations` products of two
    (matrix_size, matrix_size) random matrices in `dtype` on the default
    Keras device, after two warm-up products, and returns the best run's
    `2 * matrix_size^3 * num_iterations / seconds`. The best of several
    runs, on matrices large enough to reach the matmul kernel's full speed,
    is robust to a run slowed by other work on the machine; measure it
    before training starts, not while input pipelines run. It is an
    *achievable* peak for one large matmul, so an MFU based on it is an
    upper bound of the MFU against the vendor's datasheet peak, which GPU
    and TPU users should pass to `ThroughputCallback` instead.

    Args:
        matrix_size: the side of the square matrices.
        num_iterations: the number of matmuls timed together.
        dtype: the matmul dtype: the model's compute dtype (bfloat16 matmuls
            are twice as fast as float32 on CPUs with AVX-512 BF16).
        num_repeats: the number of timed runs; the fastest is kept.

    Returns:
        FLOP/s, a float.

    Example:
    >>> measure_peak_flops(matrix_size=256, num_iterations=3, num_repeats=2) > 0
    True
    """
    n = check_positive_int("matrix_size", matrix_size)
    iterations = check_positive_int("num_iterations", num_iterations)
    repeats = check_positive_int("num_repeats", num_repeats)
    rng = np.random.default_rng(0)
    # Cast on the device: NumPy has no bfloat16 to convert from.
    a = ops.cast(ops.convert_to_tensor(rng.standard_normal((n, n)), "float32"), dtype)
    b = ops.cast(ops.convert_to_tensor(rng.standard_normal((n, n)), "float32"), dtype)
    for _ in range(2):
        out = ops.matmul(a, b)
    keras.ops.convert_to_numpy(ops.cast(out[0, 0], "float32"))
    best = math.inf
    for _ in range(repeats):
        start = _clock()
        for _ in range(iterations):
            out = ops.matmul(a, b)
        # Devices run in order, so the last result being ready means all are.
        keras.ops.convert_to_numpy(ops.cast(out[0, 0], "float32"))
        best = min(best, _clock() - start)
    return 2.0 * n**3 * iterations / max(best, 1e-9)


def model_flops_utilization(achieved_flops, peak_flops):
    """`achieved_flops / peak_flops`, or NaN when that would exceed 1.

    A utilisation above 100% is impossible: it means the peak was
    underestimated (measured while something else ran, in the wrong dtype,
    or on matrices too small), so no figure is returned for it.

    Args:
        achieved_flops: model FLOP/s, tokens per second times FLOPs per token.
        peak_flops: the peak FLOP/s it is compared with.

    Returns:
        A float in [0, 1], or NaN.

    Example:
    >>> model_flops_utilization(5e10, 2e11)
    0.25
    >>> model_flops_utilization(3e11, 2e11)
    nan
    """
    check_positive_float("peak_flops", peak_flops)
    ratio = achieved_flops / peak_flops
    return ratio if ratio <= 1.0 else math.nan


def format_mfu(achieved_flops, peak_flops):
    """The MFU beside the peak it is relative to, for printing.

    Args:
        achieved_flops: model FLOP/s, tokens per second times FLOPs per token.
        peak_flops: the peak FLOP/s used.

    Returns:
        `"MFU 25.00% of a 2e+11 FLOP/s peak"`, or, when the achieved rate
        exceeds the peak, a sentence saying the peak was underestimated.

    Example:
    >>> format_mfu(5e10, 2e11)
    'MFU 25.00% of a 2e+11 FLOP/s peak'
    >>> print(format_mfu(3e11, 2e11))  # doctest: +ELLIPSIS
    MFU unknown: 3e+11 model FLOP/s exceeds the 2e+11 FLOP/s peak used, ...
    """
    mfu = model_flops_utilization(achieved_flops, peak_flops)
    if math.isnan(mfu):
        return (
            f"MFU unknown: {achieved_flops:.3g} model FLOP/s exceeds the "
            f"{peak_flops:.3g} FLOP/s peak used, so that peak was underestimated "
            "(pass the device's peak: peak_flops=, or --peak-flops)"
        )
    return f"MFU {100 * mfu:.2f}% of a {peak_flops:.3g} FLOP/s peak"

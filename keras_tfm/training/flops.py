"""Model FLOPs per token and the device's peak FLOP/s, for MFU."""

import time

import keras
import numpy as np
from keras import ops

from keras_tfm.validation import check_positive_int


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


def measure_peak_flops(matrix_size=1024, num_iterations=10, dtype="float32"):
    """Measures the device's dense matmul throughput, in FLOP/s.

    Times `num_iterations` products of two (matrix_size, matrix_size) random
    matrices on the default Keras device after two warm-up products, and
    returns `2 * matrix_size^3 * num_iterations / seconds`. It is an
    *achievable* peak for one large float32 matmul, so an MFU based on it is
    an upper bound of the MFU against the vendor's datasheet peak, which GPU
    and TPU users should pass to `ThroughputCallback` instead.

    Args:
        matrix_size: the side of the square matrices.
        num_iterations: the number of timed matmuls.
        dtype: the matmul dtype.

    Returns:
        FLOP/s, a float.

    Example:
    >>> measure_peak_flops(matrix_size=256, num_iterations=3) > 0
    True
    """
    n = check_positive_int("matrix_size", matrix_size)
    iterations = check_positive_int("num_iterations", num_iterations)
    rng = np.random.default_rng(0)
    # Cast on the device: NumPy has no bfloat16 to convert from.
    a = ops.cast(ops.convert_to_tensor(rng.standard_normal((n, n)), "float32"), dtype)
    b = ops.cast(ops.convert_to_tensor(rng.standard_normal((n, n)), "float32"), dtype)
    for _ in range(2):
        out = ops.matmul(a, b)
    keras.ops.convert_to_numpy(ops.cast(out[0, 0], "float32"))
    start = time.perf_counter()
    for _ in range(iterations):
        out = ops.matmul(a, b)
    # Devices run in order, so the last result being ready means all are.
    keras.ops.convert_to_numpy(ops.cast(out[0, 0], "float32"))
    seconds = time.perf_counter() - start
    return 2.0 * n**3 * iterations / max(seconds, 1e-9)

"""Which weight layout makes int8 and bfloat16 fast on a CPU: the bare matvec.

A batch-1 decoding step is 30 layers of matrix-vector products. This times
SmolLM2's feed-forward shape (576 x 1,536, 30 of them: 26.5M weights, held
in `tf.Variable`s as in a model) under XLA, one jit-compiled function for
all 30, as float32, as int8 the way Keras's int8 Dense computes it
(`matmul(x, int8 kernel) / scale` on an (in, out) kernel: XLA fuses the int8
-> float conversion into its own loop dot, which strides across rows), as
int8 written as a multiply-and-reduce, as keras-tfm's output-major int8
(`weight_only_matmul`: contiguous rows), the same in two halves, and as
bfloat16 either way, and as int8 weights times int8 activations (an int32
dot, llama.cpp's way; run it also with XLA's YNNPACK library kernels:
`XLA_FLAGS=--xla_cpu_experimental_ynn_fusion_type=individual_dot`);
median of 15 after a warm-up. There is no decoding loop here, so nothing is
hoisted: this is the product alone. Beside each: the bytes of weights read per
call over the time (GB/s), against the NumPy copy bandwidth.

    python benchmarks/int8_matvec.py
    taskset -c 0 python benchmarks/int8_matvec.py   # on one core
    XLA_FLAGS=--xla_cpu_experimental_ynn_fusion_type=individual_dot \
        python benchmarks/int8_matvec.py                # library int8 dots
"""

import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from run import copy_bandwidth  # noqa: E402

from keras_tfm.kernels.weight_only_matmul import weight_only_matmul  # noqa: E402

IN, OUT, LAYERS, REPEATS = 576, 1536, 30, 15


def matvec(kind, x, kernel, scale):
    """One (batch, IN) x (IN, OUT) product in the given weight format."""
    if kind == "float32 dot":
        return x @ kernel
    if kind == "int8, dequantised dot (Keras)":
        return tf.matmul(x, tf.cast(kernel, tf.float32)) / scale
    if kind == "int8, multiply and reduce":
        products = x[:, :, None] * tf.cast(kernel, tf.float32)
        return tf.reduce_sum(products, axis=1) / scale
    if kind == "int8, output-major (keras-tfm)":
        return weight_only_matmul(x, kernel, scale)
    if kind == "int8, output-major, two halves":
        # Does XLA run two independent halves on the two cores? (It does not.)
        half = OUT // 2
        halves = [(kernel[:half], scale[:half]), (kernel[half:], scale[half:])]
        return tf.concat([weight_only_matmul(x, k, s) for k, s in halves], -1)
    if kind == "int8 x int8 activations, int32 dot":
        # llama.cpp's way: each row of x quantised to int8 (its own scale),
        # an int8 x int8 -> int32 dot, rescaled. Rows padded to 2: XLA's
        # YNNPACK fusion (XLA_FLAGS=--xla_cpu_experimental_ynn_fusion_type=
        # individual_dot) takes no matrix-vector dot.
        rows = tf.shape(x)[0]
        padded = tf.concat([x, tf.zeros_like(x[:1])], 0) if x.shape[0] == 1 else x
        x_scale = tf.reduce_max(tf.abs(padded), -1, keepdims=True) / 127 + 1e-12
        x_int8 = tf.cast(tf.round(padded / x_scale), tf.int8)
        products = tf.linalg.matmul(x_int8, kernel, output_type=tf.int32)
        return (tf.cast(products, tf.float32) * x_scale / scale)[:rows]
    if kind == "bfloat16 dot":
        return tf.cast(tf.cast(x, tf.bfloat16) @ kernel, tf.float32)
    if kind == "bfloat16, output-major (keras-tfm)":
        return weight_only_matmul(x, kernel)
    raise ValueError(kind)


def weights(kind, rng):
    values = rng.integers(-127, 128, size=(LAYERS, IN, OUT)).astype("int8")
    if "output-major" in kind:
        values = values.transpose(0, 2, 1)
    dtype = {"float32": "float32", "int8": "int8", "bfloat16": tf.bfloat16}
    dtype = dtype[kind.split()[0].rstrip(",")]
    return [tf.Variable(tf.cast(v, dtype) if dtype != "int8" else v) for v in values]


def seconds(kind, batch, rng):
    kernels = weights(kind, rng)
    scales = [tf.Variable(rng.random(OUT).astype("float32") + 0.5) for _ in kernels]

    @tf.function(jit_compile=True)
    def layers(x):
        total = tf.zeros((batch, OUT))
        for kernel, scale in zip(kernels, scales, strict=True):
            y = matvec(kind, x, kernel, scale)
            total += y
            x = x + 1e-3 * y[:, :IN]  # each product depends on the last
        return total

    x = tf.constant(rng.normal(size=(batch, IN)).astype("float32"))
    layers(x)  # compiles
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        layers(x).numpy()
        times.append(time.perf_counter() - start)
    return statistics.median(times), kernels[0].dtype.size


def main():
    rng = np.random.default_rng(0)
    bandwidth = copy_bandwidth()
    print(f"NumPy copy bandwidth: {bandwidth:.1f} GB/s")
    print(f"XLA_FLAGS: {os.environ.get('XLA_FLAGS', '')}")
    kinds = [
        "float32 dot",
        "int8, dequantised dot (Keras)",
        "int8, multiply and reduce",
        "int8, output-major (keras-tfm)",
        "int8, output-major, two halves",
        "int8 x int8 activations, int32 dot",
        "bfloat16 dot",
        "bfloat16, output-major (keras-tfm)",
    ]
    print("| weights | batch | ms per 30 products | weight GB/s | ceiling ms |")
    print("|---|---|---|---|---|")
    for batch in (1, 8):
        for kind in kinds:
            time_s, itemsize = seconds(kind, batch, rng)
            nbytes = LAYERS * IN * OUT * itemsize
            print(
                f"| {kind} | {batch} | {1e3 * time_s:.2f} | "
                f"{nbytes / time_s / 1e9:.1f} | {1e3 * nbytes / bandwidth / 1e9:.2f} |"
            )


if __name__ == "__main__":
    main()

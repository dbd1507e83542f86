"""Which tile sizes make the chunked attention fastest: a sweep.

Times `chunked_dot_product_attention` alone (batch 1, 4 heads of 64, no
mask, static length), forward and forward + backward, one XLA-compiled
function per setting, median of 3 calls after a warm-up; PyTorch's
`scaled_dot_product_attention` on the same shapes beside it when
--torch-python names a Python with torch. The defaults of
`keras_tfm.kernels.chunked_attention` come from this table
(docs/benchmarks/training.md, "Long sequences").

    python benchmarks/attention_tiles.py --lengths 4096 16384 \
        --tiles 256x256 1024x128 --torch-python /work/torchenv/bin/python
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

TORCH_ATTENTION = """
import json, statistics, sys, time, torch
torch.set_num_threads(2)
length = int(sys.argv[1])
q, k, v = (torch.randn(1, 4, length, 64, requires_grad=True) for _ in range(3))
result = {}
for name in ("forward", "forward_backward"):
    times = []
    for _ in range(4):
        start = time.perf_counter()
        if name == "forward":
            with torch.no_grad():
                torch.nn.functional.scaled_dot_product_attention(q, k, v)
        else:
            y = torch.nn.functional.scaled_dot_product_attention(q, k, v)
            (y * y).sum().backward()
        times.append(time.perf_counter() - start)
    result[name] = statistics.median(times[1:])
print(json.dumps(result))
"""


def median_seconds(function, inputs, repeats=3):
    import tensorflow as tf

    def run():
        for tensor in tf.nest.flatten(function(*inputs)):
            tensor.numpy()

    run()  # trace and compile
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def keras_tfm_seconds(length, query_tile, key_tile):
    import tensorflow as tf

    from keras_tfm.kernels.chunked_attention import chunked_dot_product_attention

    inputs = [tf.random.normal((1, length, 4, 64)) for _ in range(3)]

    def attend(q, k, v):
        return chunked_dot_product_attention(
            q, k, v, scale=0.125, chunk_size=key_tile, query_chunk_size=query_tile
        )

    def forward_backward(q, k, v):
        with tf.GradientTape() as tape:
            tape.watch([q, k, v])
            loss = tf.reduce_sum(attend(q, k, v) ** 2)
        return tape.gradient(loss, [q, k, v])

    return {
        name: median_seconds(tf.function(function, jit_compile=True), inputs)
        for name, function in (("forward", attend),
                               ("forward_backward", forward_backward))
    }  # fmt: skip


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[4096, 16384])
    parser.add_argument(
        "--tiles", nargs="+", default=["256x256", "1024x256", "1024x128"],
        help="queries x keys per tile",
    )  # fmt: skip
    parser.add_argument("--torch-python", default=None)
    args = parser.parse_args()
    print("| tokens | tiles (queries x keys) | forward s | forward + backward s |")
    print("|---|---|---|---|")
    for length in args.lengths:
        for tiles in args.tiles:
            query_tile, key_tile = (int(n) for n in tiles.split("x"))
            seconds = keras_tfm_seconds(length, query_tile, key_tile)
            print(f"| {length} | {tiles} | {seconds['forward']:.3f} | "
                  f"{seconds['forward_backward']:.3f} |", flush=True)  # fmt: skip
        if args.torch_python:
            process = subprocess.run(
                [args.torch_python, "-c", TORCH_ATTENTION, str(length)],
                capture_output=True, text=True, check=True,
            )  # fmt: skip
            seconds = json.loads(process.stdout.strip().splitlines()[-1])
            print(f"| {length} | PyTorch scaled_dot_product_attention | "
                  f"{seconds['forward']:.3f} | {seconds['forward_backward']:.3f} |",
                  flush=True)  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())

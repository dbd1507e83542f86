"""Where the tiled attention's time goes under XLA: a per-operation profile.

Runs `chunked_dot_product_attention` forward + backward (batch 1, 4 heads of
64, no mask, static length, float32, XLA, the default tiles unless given)
under TensorFlow's profiler and sums the XLA CPU runtime's events by
operation, per step: the matrix products (with their FLOP/s: 7 products of
length^2 x 256 x 2 FLOPs, two forward and five backward), the exponentials,
the tile slicing and updating, and the rest; then the step's wall time,
measured without the profiler. Events are those XLA's CPU runtime records
(`--xla_cpu_enable_xprof_traceme`, set here).

    python benchmarks/attention_profile.py --length 4096
"""

import argparse
import collections
import glob
import os
import re
import statistics
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_cpu_enable_xprof_traceme=true"
)

import tensorflow as tf  # noqa: E402

# Not public API: TensorFlow's profile format, to read the events back.
from tensorflow.tsl.profiler.protobuf import xplane_pb2  # noqa: E402

from keras_tfm.kernels.chunked_attention import (  # noqa: E402
    chunked_dot_product_attention,
)

STEPS = 3


def kind(name):
    """An XLA operation's name -> the row it is summed into."""
    if name.startswith("dot"):
        return "matrix products"
    if "exponential" in name:
        return "exponentials (and what fuses with them)"
    if "dynamic-slice" in name or "dynamic-update-slice" in name:
        return "tile slicing and updating"
    return "other operations"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--length", type=int, default=4096)
    parser.add_argument("--key-tile", type=int, default=None)
    parser.add_argument("--query-tile", type=int, default=None)
    parser.add_argument("--top", type=int, default=12, help="operations listed")
    args = parser.parse_args()
    q, k, v = (tf.random.normal((1, args.length, 4, 64)) for _ in range(3))

    @tf.function(jit_compile=True)
    def step(q, k, v):
        with tf.GradientTape() as tape:
            tape.watch([q, k, v])
            y = chunked_dot_product_attention(
                q, k, v, scale=0.125, chunk_size=args.key_tile,
                query_chunk_size=args.query_tile,
            )  # fmt: skip
            loss = tf.reduce_sum(y * y)
        return tape.gradient(loss, [q, k, v])

    def run():
        start = time.perf_counter()
        for gradient in step(q, k, v):
            gradient.numpy()
        return time.perf_counter() - start

    run(), run()  # compiles, warms up
    wall = statistics.median(run() for _ in range(STEPS))
    logdir = tempfile.mkdtemp()
    tf.profiler.experimental.start(logdir)
    for _ in range(STEPS):
        run()
    tf.profiler.experimental.stop()
    space = xplane_pb2.XSpace()
    (path,) = glob.glob(f"{logdir}/**/*.xplane.pb", recursive=True)
    with open(path, "rb") as f:
        space.ParseFromString(f.read())
    seconds, by_name = collections.Counter(), collections.Counter()
    for plane in space.planes:
        names = plane.event_metadata
        for line in plane.lines:
            for event in line.events:
                name = names[event.metadata_id].name
                # Leaf operations only: not the executor, loops or waits.
                if re.match(r"(ThunkExecutor|while|call|conditional|Slinky)", name):
                    continue
                if line.name.startswith("tf_numa") or "Eigen" in line.name:
                    seconds[kind(name)] += event.duration_ps * 1e-12 / STEPS
                    by_name[name] += event.duration_ps * 1e-12 / STEPS
    flops = 7 * args.length**2 * 256 * 2
    print(f"{args.length} tokens, XLA_FLAGS {os.environ['XLA_FLAGS']!r}")
    print("| part | ms per step | note |\n|---|---|---|")
    for part, total in seconds.most_common():
        note = f"{flops / total / 1e9:.0f} GFLOP/s" if part == "matrix products" else ""
        print(f"| {part} | {1e3 * total:.1f} | {note} |")
    print(f"| sum of the operations | {1e3 * sum(seconds.values()):.1f} | |")
    print(f"| wall time of a step, unprofiled | {1e3 * wall:.1f} | |")
    print("\n| operation | ms per step |\n|---|---|")
    for name, total in by_name.most_common(args.top):
        print(f"| {name} | {1e3 * total:.1f} |")


if __name__ == "__main__":
    main()

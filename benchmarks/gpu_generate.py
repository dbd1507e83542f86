"""Greedy decoding on JAX: keras-tfm's `CausalLM.generate` beside keras-hub's
`GPT2CausalLM.generate`, both GPT-2 124M-shaped with random weights.

    KERAS_BACKEND=jax python benchmarks/gpu_generate.py            # a GPU
    KERAS_BACKEND=jax python benchmarks/gpu_generate.py --tiny     # a CPU check

Each row: a batch of `--prompt`-token prompts continued by `--new` tokens
(no stop token), the second call timed (the first compiles), best of
`--repeats`. keras-hub's `generate` takes a fixed buffer of prompt + new
positions with a padding mask, as its preprocessor gives it; keras-tfm's
takes the prompts as lists of ids. Beside each row: the new tokens per
second and, for batch 1, the float32 weights' bytes read per step over the
time per step (the memory-bandwidth ceiling an H100 puts at 3.35 TB/s).
"""

import argparse
import json
import time

import numpy as np


def shapes(tiny):
    if tiny:
        return dict(vocabulary_size=512, num_layers=2, num_heads=2, hidden_dim=64,
                    intermediate_dim=128, max_sequence_length=256)  # fmt: skip
    return dict(vocabulary_size=50304, num_layers=12, num_heads=12, hidden_dim=768,
                intermediate_dim=3072, max_sequence_length=1024)  # fmt: skip


def keras_hub_runner(config, prompt, new):
    import keras_hub

    backbone = keras_hub.models.GPT2Backbone(dropout=0.0, **config)
    model = keras_hub.models.GPT2CausalLM(backbone=backbone, preprocessor=None)

    def run(ids):
        batch = ids.shape[0]
        tokens = np.zeros((batch, prompt + new), "int32")
        tokens[:, :prompt] = ids
        mask = np.zeros_like(tokens, dtype=bool)
        mask[:, :prompt] = True
        inputs = {"token_ids": tokens, "padding_mask": mask}
        return model.generate(inputs, stop_token_ids=None)

    return run, sum(int(np.prod(v.shape)) for v in model.weights)


def keras_tfm_runner(config, prompt, new):
    from keras_tfm.models import CausalLM, DecoderBackbone

    backbone = DecoderBackbone(activation="gelu_approximate", padding_id=None, **config)
    model = CausalLM(backbone)

    def run(ids):
        return model.generate(ids.tolist(), max_new_tokens=new, stop_token_ids=[])

    return run, sum(int(np.prod(v.shape)) for v in model.weights)


def timed(run, ids, repeats):
    run(ids)  # compiles
    best = float("inf")
    for _ in range(repeats):
        began = time.perf_counter()
        run(ids)
        best = min(best, time.perf_counter() - began)
    return best


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--prompt", type=int, default=128)
    parser.add_argument("--new", type=int, default=128)
    parser.add_argument("--batches", default="1,16")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--parts", default="keras_hub,keras_tfm")
    args = parser.parse_args(argv)
    import jax

    device = str(jax.devices()[0])
    config = shapes(args.tiny)
    rng = np.random.default_rng(0)
    runners = {"keras_hub": keras_hub_runner, "keras_tfm": keras_tfm_runner}
    rows = []
    for part in args.parts.split(","):
        run, parameters = runners[part](config, args.prompt, args.new)
        for batch in map(int, args.batches.split(",")):
            ids = rng.integers(1, config["vocabulary_size"], (batch, args.prompt))
            seconds = timed(run, ids, args.repeats)
            step_ms = 1000 * seconds / args.new
            row = {
                "part": part, "device": device, "batch": batch,
                "prompt": args.prompt, "new": args.new, "seconds": round(seconds, 4),
                "new_tokens_per_s": round(batch * args.new / seconds, 1),
                "ms_per_step": round(step_ms, 3),
                "weights_gb_per_s": round(4 * parameters / (step_ms / 1000) / 1e9, 1),
            }  # fmt: skip
            print(json.dumps(row), flush=True)
            rows.append(row)
    print(f"\n| {device} | batch | ms per step | new tokens/s "
          "| float32 weights read, GB/s |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['part']} | {r['batch']} | {r['ms_per_step']} | "
              f"{r['new_tokens_per_s']} | {r['weights_gb_per_s']} |")


if __name__ == "__main__":
    main()

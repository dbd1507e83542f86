"""Seconds per training step of examples/translate_es_en.py's recipe, by variant.

Times `--steps` optimizer steps (after `--warmup` untimed ones) of the
Spanish -> English Seq2SeqLM on the same shuffled training batches under each
variant: dtype policy (float32 / mixed_bfloat16), XLA (`jit_compile`),
width and vocabulary size; prints the median step time, the real (non-padding) target
tokens per second and the loss after the steps, so that a cheaper step can be
checked not to learn worse.

    python benchmarks/translate_es_en_steps.py --steps 20 --variants f32 bf16
    python benchmarks/translate_es_en_steps.py --steps 20 --variants f32 \\
        --hidden-dim 192
"""

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(Path(__file__).parents[1] / "examples"))

import keras  # noqa: E402
import numpy as np  # noqa: E402
from translate_de_en import build_model  # noqa: E402
from translate_es_en import FULL, SEED  # noqa: E402

from keras_tfm.data import translation  # noqa: E402
from keras_tfm.datasets import sword_parallel  # noqa: E402

VARIANTS = {  # name: (dtype policy, jit_compile)
    "f32": ("float32", False),
    "f32-xla": ("float32", True),
    "bf16": ("mixed_bfloat16", False),
    "bf16-xla": ("mixed_bfloat16", True),
}


class StepTimes(keras.callbacks.Callback):
    def on_train_batch_begin(self, batch, logs=None):
        self.tick = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        self.times.append(time.perf_counter() - self.tick)
        self.losses.append(float(logs["loss"]))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS))
    parser.add_argument("--vocabulary-size", type=int, default=8000)
    parser.add_argument("--tokens-per-batch", type=int, default=4096)
    parser.add_argument(
        "--hidden-dim", type=int, default=FULL["model"]["hidden_dim"],
        help="d_model (the feed-forward width is 4x)",
    )  # fmt: skip
    parser.add_argument("--sword-path", default="/usr/share/sword")
    args = parser.parse_args()

    verses = sword_parallel.load_parallel_verses(args.sword_path)
    train_pairs, _, _ = sword_parallel.split_parallel_verses(verses)
    tokenizer = translation.train_translation_tokenizer(
        [s for pair in train_pairs for s in pair],
        args.vocabulary_size,
        learner="huggingface",
    )
    shape = dict(
        FULL["model"], hidden_dim=args.hidden_dim, intermediate_dim=4 * args.hidden_dim
    )
    config = dict(FULL, model=shape, steps=1000, tokens_per_batch=args.tokens_per_batch)
    dataset = translation.translation_dataset(
        train_pairs, tokenizer, config["batch_size"], config["max_length"], True,
        SEED, config["bucket_boundaries"], config["tokens_per_batch"],
    )  # fmt: skip
    n = args.warmup + args.steps
    batches = list(dataset.take(n))
    real = [int(np.sum(y.numpy() != 0)) for _, y in batches]
    padded = [int(np.prod(y.shape)) for _, y in batches]
    print(f"vocabulary {tokenizer.vocabulary_size()}, {len(dataset)} batches a "
          f"pass; target tokens real/padded in these batches: "
          f"{sum(real) / sum(padded):.2f}")  # fmt: skip
    for name in args.variants:
        policy, jit = VARIANTS[name]
        keras.utils.set_random_seed(SEED)
        keras.config.set_dtype_policy(policy)
        model = build_model(dict(config, device_defaults=False), tokenizer)
        model.jit_compile = jit
        timer = StepTimes()
        timer.times, timer.losses = [], []
        tick = time.time()
        model.fit(
            (batch for batch in batches), steps_per_epoch=n, epochs=1,
            callbacks=[timer], verbose=0,
        )  # fmt: skip
        timed = np.array(timer.times[args.warmup :])
        tokens = sum(real[args.warmup :])
        print(f"{name:9} median {np.median(timed):.3f} s/step, mean "
              f"{timed.mean():.3f}, {tokens / timed.sum():,.0f} target tokens/s; "
              f"first steps {', '.join(f'{t:.1f}' for t in timer.times[:3])} s; "
              f"loss after {n} steps {timer.losses[-1]:.3f}; wall "
              f"{time.time() - tick:.0f} s; load {os.getloadavg()[0]:.1f}",
              flush=True)  # fmt: skip


if __name__ == "__main__":
    main()

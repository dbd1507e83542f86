"""The `keras-tfm` command: train, generate, evaluate, list presets.

keras-tfm train                      # a byte-level GPT on the shipped KJV text
keras-tfm generate kjv_gpt.keras --prompt "And God said"
keras-tfm evaluate kjv_gpt.keras
keras-tfm presets

The `keras-tfm` console script starts in `keras_tfm_launcher`, which silences
TensorFlow's start-up logs before TensorFlow is imported; `--verbose` keeps
them.
"""

import argparse
import math
import sys
import time
from pathlib import Path

DEFAULT_OUTPUT = "kjv_gpt.keras"
VALIDATION_FRACTION = 0.1  # the last 10% of the text, in order


def _positive_int(text):
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def _read_corpus(path):
    from keras_tfm.datasets import load_default_corpus

    if path is None:
        return load_default_corpus(), "the shipped KJV Genesis and Exodus"
    path = Path(path)
    if not path.is_file():
        raise SystemExit(f"keras-tfm: no such file: {path}")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise SystemExit(
            f"keras-tfm: {path} is not UTF-8 text ({error.reason} at byte "
            f"{error.start}); convert it with e.g. `iconv -t utf-8`."
        ) from None
    if not text.strip():
        raise SystemExit(f"keras-tfm: {path} is empty.")
    return text, str(path)


def _datasets(model, text, args):
    from keras_tfm.data import language_model_datasets

    return language_model_datasets(
        text,
        model.tokenizer,
        sequence_length=args.sequence_length,
        batch_size=args.batch_size,
        validation_fraction=VALIDATION_FRACTION,
        seed=args.seed,
    )


def _load(path):
    import keras

    from keras_tfm import saving

    if not Path(path).is_file():
        raise SystemExit(f"keras-tfm: no such model file: {path}")
    try:
        saving.check_model_file(path)
    except ValueError as error:
        raise SystemExit(f"keras-tfm: {error}") from None
    return keras.models.load_model(path)


WEIGHTS = ("float32", "int8", "bfloat16")
"""`--weights` of `generate` and `chat`: how the weight matrices are stored."""


def _store_weights(model, weights):
    """Weight-only int8 or bfloat16 matrices: fewer bytes read per decoded
    token, what makes decoding faster on a CPU (docs/deployment.md)."""
    from keras_tfm.models import int8_weight_only_config

    try:
        if weights == "int8":
            model.quantize("int8", config=int8_weight_only_config())
        elif weights == "bfloat16":
            model.cast_weights("bfloat16")
    except ValueError as error:
        raise SystemExit(f"keras-tfm: --weights {weights}: {error}") from None
    return model


def _add_weights_option(parser):
    parser.add_argument(
        "--weights",
        default="float32",
        choices=WEIGHTS,
        help="store the weight matrices as weight-only int8 or bfloat16: "
        "faster decoding on a CPU, logits within a few percent",
    )


def _positive_float(text):
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text}")
    return value


def _save_freq(text):
    if text == "epoch":
        return text
    try:
        return _positive_int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be 'epoch' or a positive number of steps, got {text}"
        ) from None


def _epoch_stream(windows, args, first_epoch, last_epoch, skip_batches=0):
    """Batches of epochs [first_epoch, last_epoch), the order of each a
    function of (seed, epoch) only, so that a restarted run sees the same
    batches; the first `skip_batches` are left out (already trained on)."""
    import numpy as np
    import tensorflow as tf

    from keras_tfm import distribute

    epochs = []
    for epoch in range(first_epoch, last_epoch):
        order = np.random.default_rng([args.seed, epoch]).permutation(len(windows))
        batches = tf.data.Dataset.from_tensor_slices(
            (windows[order, :-1], windows[order, 1:])
        ).batch(args.batch_size)
        epochs.append(batches.skip(skip_batches) if epoch == first_epoch else batches)
    stream = epochs[0]
    for batches in epochs[1:]:
        stream = stream.concatenate(batches)
    return distribute.shard_by_data(stream.prefetch(tf.data.AUTOTUNE))


def _best_model_callback(directory, enabled):
    """Keeps `<checkpoint dir>/best.keras`, the lowest validation loss so far,
    across restarts (the best value is kept beside it in best.json)."""
    import json  # lazy, as the rest of this module

    import keras

    from keras_tfm.saving import atomic_save, atomic_write_text

    class BestModel(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.path = Path(directory) / "best.keras"
            self.record = Path(directory) / "best.json"
            self.best = math.inf
            if self.record.is_file():
                self.best = json.loads(self.record.read_text())["val_loss"]

        def on_epoch_end(self, epoch, logs=None):
            loss = (logs or {}).get("val_loss")
            if not enabled or loss is None or not loss < self.best:
                return
            self.best = float(loss)
            atomic_save(self.model, self.path)
            record = {"val_loss": self.best, "epoch": epoch + 1}
            atomic_write_text(self.record, json.dumps(record))

    return BestModel()


def train(args):
    from keras_tfm import distribute

    # First: a multi-worker strategy must exist before any TensorFlow work.
    strategy = distribute.strategy_from_flags(args.strategy, tpu=args.tpu)

    import keras
    import keras_hub
    import numpy as np

    from keras_tfm import baselines, training, zoo
    from keras_tfm.saving import ResumableBackupAndRestore, atomic_save

    keras.utils.set_random_seed(args.seed)
    defaults = training.device_defaults()
    if args.dtype_policy == "auto":
        args.dtype_policy = defaults.dtype_policy
    if args.jit_compile is None:
        args.jit_compile = defaults.jit_compile
    keras.config.set_dtype_policy(args.dtype_policy)
    xla = "on" if args.jit_compile else "off"
    print(f"{args.dtype_policy}, XLA {xla} (device defaults: {defaults.reason})")
    peak_flops, peak_source = _peak_flops(args, strategy)
    print(f"Peak for MFU: {peak_flops:.3g} FLOP/s ({peak_source}).")
    text, source = _read_corpus(args.data)
    with strategy.scope():
        model = zoo.from_preset(
            args.preset,
            vocabulary_size=256,
            max_sequence_length=args.sequence_length,
            dropout=args.dropout,
            # Keep case: keras-hub lowercases by default, and KJV is not lowercase.
            tokenizer=keras_hub.tokenizers.ByteTokenizer(lowercase=False),
        )
    train_data, validation_data = _datasets(model, text, args)
    # The windows, in a fixed order; each epoch permutes them with (seed, epoch).
    windows = np.stack(
        [
            np.concatenate([x, y[-1:]])
            for x, y in train_data.unbatch().as_numpy_iterator()
        ]
    )
    steps_per_epoch = math.ceil(len(windows) / args.batch_size)
    steps = args.epochs * steps_per_epoch
    schedule = keras.optimizers.schedules.CosineDecay(
        0.0,
        decay_steps=max(1, steps - steps // 10),
        warmup_target=args.learning_rate,
        warmup_steps=steps // 10,
        alpha=0.1,
    )
    with strategy.scope():
        model.compile(
            optimizer=keras.optimizers.AdamW(schedule, weight_decay=0.01),
            loss=training.TokenCrossEntropy(ignore_class=None),
            metrics=[training.TokenAccuracy(ignore_class=None)],
            jit_compile=args.jit_compile,
        )
    distribute.build_for_fit(model, next(iter(_epoch_stream(windows, args, 0, 1))))
    checkpoints = Path(args.checkpoint_dir or f"{args.output}.checkpoints")
    chief = distribute.is_chief()
    backup = ResumableBackupAndRestore(
        str(checkpoints / f"backup-{distribute.task_id()}"), save_freq=args.save_freq
    )
    done = backup.restore(model)
    epoch, skip = divmod(done, steps_per_epoch)
    if strategy.num_replicas_in_sync > 1:
        print(f"Distributing with {type(strategy).__name__} over "
              f"{strategy.num_replicas_in_sync} replicas.")  # fmt: skip
    print(
        f"Training preset '{args.preset}' ({model.count_params():,} parameters) on "
        f"{source}: {len(text):,} characters, {steps} steps."
    )
    if done:
        print(f"Resuming from {backup.backup_dir} at step {done} (epoch {epoch + 1}).")
    flops_per_token = training.training_flops_per_token(
        model.count_params(), model.num_layers, model.hidden_dim, args.sequence_length
    )
    callbacks = [
        # Silent: Keras' progress line of each epoch shows tokens_per_second.
        training.ThroughputCallback(
            tokens_per_step=args.batch_size * args.sequence_length,
            flops_per_token=flops_per_token,
            peak_flops=peak_flops,
            verbose=0,
        ),
        backup,
        _best_model_callback(checkpoints, enabled=chief),
    ]
    fit = dict(
        validation_data=validation_data,
        callbacks=callbacks,
        shuffle=False,  # the stream is ordered per epoch
        verbose=1 if sys.stdout.isatty() else 2,
    )
    started = time.perf_counter()
    history = None
    if skip:  # finish the interrupted epoch first
        history = model.fit(
            _epoch_stream(windows, args, epoch, epoch + 1, skip),
            initial_epoch=epoch,
            epochs=epoch + 1,
            steps_per_epoch=steps_per_epoch - skip,
            **fit,
        )
        epoch += 1
    if epoch < args.epochs:
        history = model.fit(
            _epoch_stream(windows, args, epoch, args.epochs),
            initial_epoch=epoch,
            epochs=args.epochs,
            steps_per_epoch=steps_per_epoch,
            **fit,
        )
    minutes = (time.perf_counter() - started) / 60
    if history is not None:
        tokens_per_second = history.history["tokens_per_second"][-1]
        mfu = training.format_mfu(tokens_per_second * flops_per_token, peak_flops)
        print(f"Last epoch: {tokens_per_second:,.0f} tokens/s, {mfu}.")
        validation_loss = history.history["val_loss"][-1]
    else:
        validation_loss = model.evaluate(validation_data, verbose=0, return_dict=True)
        validation_loss = validation_loss["loss"]
    if chief:
        atomic_save(model, args.output)
    backup.delete()
    print(
        f"Saved {args.output} after {minutes:.1f} min: validation loss "
        f"{validation_loss:.3f} nats/byte, perplexity {math.exp(validation_loss):.2f}."
    )
    # The anchor: bzip2 -9 coding the same held-out bytes after the training ones.
    anchor = baselines.held_out_nats_per_byte(
        text, args.sequence_length, VALIDATION_FRACTION
    )
    print(f"{'validation bytes, model vs baseline':<36} nats/byte")
    print(f"{'model (' + args.preset + ')':<36} {validation_loss:9.4f}")
    print(f"{'bzip2 -9 given the training text':<36} {anchor:9.4f}")
    if not args.samples:
        return
    for prompt in args.prompt or ["And God said", "Moses went"]:
        room = model.max_sequence_length - len(model.tokenizer(prompt))
        sample = model.generate(
            prompt,
            max_new_tokens=min(args.max_new_tokens, room),
            sampler="top_k",
            top_k=10,
            temperature=0.8,
            seed=args.seed,
        )
        print(f"\n>>> {sample}")


def _peak_flops(args, strategy):
    """The peak FLOP/s of all replicas together, and where it comes from."""
    if args.peak_flops is not None:
        return args.peak_flops, "--peak-flops"
    import keras

    from keras_tfm import training

    # Measured here, before any input pipeline runs, in the compute dtype.
    dtype = keras.config.dtype_policy().compute_dtype
    size, repeats = 2048, 3
    peak = training.measure_peak_flops(size, dtype=dtype, num_repeats=repeats)
    replicas = strategy.num_replicas_in_sync
    source = f"measured: best of {repeats} runs of {dtype} {size}x{size} matmuls"
    if replicas > 1:
        source += f", times {replicas} replicas"
    return peak * replicas, source + "; set it with --peak-flops"


def generate(args):
    model = _store_weights(_load(args.model), args.weights)
    if model.tokenizer is None and args.prompt:
        raise SystemExit("keras-tfm: this model has no tokenizer attached.")
    # Beam search decides at the end, so it prints its result at once;
    # sampling prints each new piece as it comes.
    stream = args.sampler != "beam" and args.num_beams == 1
    for prompt in args.prompt:
        output = model.generate(
            prompt,
            max_new_tokens=args.max_new_tokens,
            sampler=args.sampler,
            top_k=args.top_k,
            top_p=args.top_p,
            temperature=args.temperature,
            num_beams=args.num_beams,
            seed=args.seed,
            stream=stream,
        )
        if not stream:
            print(output)
            continue
        print(prompt, end="", flush=True)
        for piece in output:
            print(piece, end="", flush=True)
        print()


def evaluate(args):
    model = _load(args.model)
    text, source = _read_corpus(args.data)
    args.sequence_length = args.sequence_length or model.max_sequence_length
    _, validation_data = _datasets(model, text, args)
    results = model.evaluate(validation_data, return_dict=True, verbose=0)
    loss = results["loss"]
    print(
        f"{source}, validation split: loss {loss:.4f}, perplexity {math.exp(loss):.3f}"
    )


def chat(args):
    from keras_tfm import zoo

    model = zoo.from_preset(args.preset) if args.model is None else _load(args.model)
    model = _store_weights(model, args.weights)
    pieces = model.chat(
        args.message,
        max_new_tokens=args.max_new_tokens,
        stream=True,
        sampler=args.sampler,
        temperature=args.temperature,
        top_p=args.top_p,
        seed=args.seed,
    )
    for piece in pieces:
        print(piece, end="", flush=True)
    print()


def presets(args):
    from keras_tfm import zoo

    names = zoo.list_presets()
    width = max(len(name) for name in names)
    print(f"{'preset':<{width}}  weights")
    for name in names:
        print(f"{name:<{width}}  {zoo.preset_weights(name)}")


def build_parser():
    parser = argparse.ArgumentParser(
        prog="keras-tfm", description=__doc__.split("\n")[0]
    )
    commands = parser.add_subparsers(dest="command", required=True)
    # Read by keras_tfm_launcher before TensorFlow is imported; listed here
    # so that every command accepts it and --help shows it.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--verbose",
        action="store_true",
        help="show TensorFlow's start-up and C++ logs and dependencies' warnings",
    )

    p = commands.add_parser(
        "train", parents=[common], help="train a decoder-only preset on a text file"
    )
    p.add_argument("--data", help="a UTF-8 text file (default: the shipped KJV text)")
    p.add_argument("--preset", default="gpt_micro")
    p.add_argument("--epochs", type=_positive_int, default=8)
    p.add_argument("--batch-size", type=_positive_int, default=16)
    p.add_argument("--sequence-length", type=_positive_int, default=128)
    p.add_argument("--learning-rate", type=_positive_float, default=3e-3)
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument(
        "--dtype-policy",
        default="auto",
        help="float32, mixed_bfloat16 or mixed_float16; auto (default): the "
        "fastest measured for this device (keras_tfm.training.device_defaults)",
    )
    p.add_argument(
        "--jit",
        dest="jit_compile",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="compile with XLA (default: as device_defaults says)",
    )
    p.add_argument("--output", default=DEFAULT_OUTPUT)
    p.add_argument(
        "--peak-flops",
        type=_positive_float,
        help="the peak FLOP/s (all devices together) that MFU is relative to, "
        "e.g. 312e12 for an A100 in bfloat16; default: measured before training",
    )
    p.add_argument("--prompt", action="append", help="prompts for the samples")
    p.add_argument("--max-new-tokens", type=_positive_int, default=120)
    p.add_argument(
        "--samples",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="print samples from the trained model (default: on)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--strategy",
        default="auto",
        choices=["auto", "default", "mirrored", "multi_worker", "tpu"],
        help="tf.distribute strategy; auto: multi_worker when TF_CONFIG names "
        "several tasks, mirrored on several GPUs, else one device",
    )
    p.add_argument("--tpu", help="the TPU's name or address (with --strategy tpu)")
    p.add_argument(
        "--checkpoint-dir",
        help="backups (to resume after a crash) and best.keras "
        "(default: <output>.checkpoints)",
    )
    p.add_argument(
        "--save-freq",
        type=_save_freq,
        default="epoch",
        help="back up every N steps, or 'epoch' (default)",
    )
    p.set_defaults(run=train)

    p = commands.add_parser(
        "generate", parents=[common], help="continue prompts with a saved model"
    )
    p.add_argument("model", help="a .keras file written by `keras-tfm train`")
    p.add_argument("--prompt", action="append", required=True)
    p.add_argument("--max-new-tokens", type=_positive_int, default=200)
    p.add_argument(
        "--sampler",
        default="top_k",
        choices=["greedy", "random", "top_k", "top_p", "beam"],
    )
    p.add_argument("--top-k", type=_positive_int, default=10)
    p.add_argument("--top-p", type=float, default=0.9)
    p.add_argument("--temperature", type=float, default=0.8)
    p.add_argument("--num-beams", type=_positive_int, default=1)
    p.add_argument("--seed", type=int)
    _add_weights_option(p)
    p.set_defaults(run=generate)

    p = commands.add_parser(
        "evaluate", parents=[common], help="validation loss and perplexity"
    )
    p.add_argument("model")
    p.add_argument("--data", help="a UTF-8 text file (default: the shipped KJV text)")
    p.add_argument("--sequence-length", type=_positive_int)
    p.add_argument("--batch-size", type=_positive_int, default=32)
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(run=evaluate)

    p = commands.add_parser(
        "chat", parents=[common], help="ask an instruct model (SmolLM2 by default)"
    )
    p.add_argument("message", help="the user's message")
    p.add_argument("--preset", default="smollm2_135m_instruct")
    p.add_argument("--model", help="a .keras file instead of a preset")
    p.add_argument("--max-new-tokens", type=_positive_int, default=256)
    p.add_argument("--sampler", default="greedy", choices=["greedy", "top_p"])
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--top-p", type=float, default=0.9)
    p.add_argument("--seed", type=int)
    _add_weights_option(p)
    p.set_defaults(run=chat)

    p = commands.add_parser(
        "presets",
        parents=[common],
        help="list the zoo's presets and whether their weights are pretrained, "
        "trained here or none (an architecture)",
    )
    p.set_defaults(run=presets)
    return parser


def main(argv=None):
    # `--verbose` (and quiet by default) is handled by keras_tfm_launcher:
    # here TensorFlow is already imported, too late to configure its logs.
    args = build_parser().parse_args(argv)
    try:
        args.run(args)
    except ValueError as error:
        raise SystemExit(f"keras-tfm: {error}") from None


if __name__ == "__main__":
    main()

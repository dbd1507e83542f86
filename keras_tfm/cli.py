"""The `keras-tfm` command: train, generate, evaluate, chat, classify, presets.

keras-tfm train            # gpt_micro, byte-level, on the shipped KJV text
keras-tfm generate gpt_micro_genesis_exodus.keras --prompt "And God said"
keras-tfm evaluate gpt_micro_genesis_exodus.keras
keras-tfm generate kjv_gpt --prompt "And God said"      # a preset, alike
keras-tfm presets          # each preset's task, parameters and command

A command's model is a `.keras` file if that path exists, else a preset
name. This module parses and dispatches; the training recipe is
`keras_tfm.training.train_language_model`.

The `keras-tfm` console script starts in `keras_tfm_launcher`, which silences
TensorFlow's start-up logs before TensorFlow is imported; `--verbose` keeps
them.
"""

import argparse
import inspect
import json
import math
import re
import shutil
import sys
import time
from pathlib import Path

VALIDATION_FRACTION = 0.1  # the last 10% of the text, in order
# `train` writes <preset>_<text>.keras: gpt_micro_genesis_exodus.keras by
# default, named for what it is (not for the zoo's kjv_gpt, a BPE model).
SHIPPED_TEXT_NAME = "genesis_exodus"


def _positive_int(text):
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def _read_corpus(path):
    """(text, where it comes from, a short name for the output file)."""
    from keras_tfm.datasets import load_default_corpus

    if path is None:
        shipped = "the shipped KJV Genesis and Exodus"
        return load_default_corpus(), shipped, SHIPPED_TEXT_NAME
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
    return text, str(path), path.stem


def _datasets(model, text, sequence_length, batch_size, seed):
    from keras_tfm.data import language_model_datasets

    return language_model_datasets(
        text,
        model.tokenizer,
        sequence_length=sequence_length,
        batch_size=batch_size,
        validation_fraction=VALIDATION_FRACTION,
        seed=seed,
    )


def resolve_model(reference):
    """The model a command names: a `.keras` file if `reference` is a path
    that exists (loaded through `keras_tfm.saving.load_model`), else a preset
    of the zoo (`keras_tfm.zoo.from_preset`); neither: a one-line error."""
    from keras_tfm import saving, zoo

    if Path(reference).is_file():
        try:
            return saving.load_model(reference)
        except ValueError as error:
            raise SystemExit(f"keras-tfm: {error}") from None
    if reference in zoo.list_presets():
        return zoo.from_preset(reference)
    raise SystemExit(
        f"keras-tfm: {reference!r} is neither a model file (no such model file: "
        f"{reference}) nor a preset (`keras-tfm presets` lists them)."
    )


# What each command takes, for the error of `_language_model`.
WANTED = {
    "generate": "a keras-tfm model with `generate` and a tokenizer",
    "evaluate": "a keras-tfm CausalLM with a tokenizer",
    "chat": "a keras-tfm CausalLM with a tokenizer and chat template",
    "classify": "a keras-tfm classifier with a tokenizer",
}


# Encoder-decoder classes (a Seq2SeqLM is also a CausalLM): not for `evaluate`.
SEQ2SEQ_CLASSES = ("Seq2SeqLM", "Seq2SeqTransformer")


def _language_model(reference, needs="generate"):
    """`resolve_model(reference)`, checked to be a keras-tfm model with a
    tokenizer and the method `needs` (a one-line error otherwise)."""
    from keras_tfm import models

    model = resolve_model(reference)
    usable = callable(getattr(model, needs, None)) and hasattr(model, "tokenizer")
    if needs == "evaluate":  # as a decoder-only language model
        seq2seq = [getattr(models, name, None) for name in SEQ2SEQ_CLASSES]
        usable = isinstance(model, models.CausalLM) and not isinstance(
            model, tuple(cls for cls in seq2seq if cls is not None)
        )
    if not usable:
        kind = f"{type(model).__module__.split('.')[0]} {type(model).__name__}"
        raise SystemExit(
            f"keras-tfm: {reference} is a {kind}; `keras-tfm {needs}` takes "
            f"{WANTED[needs]} (`keras-tfm presets` shows the command that fits "
            "each preset)."
        )
    if model.tokenizer is None:
        raise SystemExit(f"keras-tfm: {reference} has no tokenizer attached.")
    return model


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


def _windows(model, text, sequence_length, batch_size, seed):
    """The training windows (tf.data, one example each, in text order), the
    validation batches and the number of training windows."""
    from keras_tfm.data.language_modeling import next_token_windows, split_offsets
    from keras_tfm.training import next_token_pairs

    _, validation = _datasets(model, text, sequence_length, batch_size, seed)
    ids = model.tokenizer(text)
    train_end, _ = split_offsets(len(ids), sequence_length, VALIDATION_FRACTION)
    windows = next_token_windows(ids[:train_end], sequence_length)
    return next_token_pairs(windows), validation, len(windows)


def train(args):
    from keras_tfm import distribute

    # First: a multi-worker strategy must exist before any TensorFlow work.
    strategy = distribute.strategy_from_flags(args.strategy, tpu=args.tpu)

    import keras
    import keras_hub

    from keras_tfm import baselines, training, zoo
    from keras_tfm.saving import atomic_save

    keras.utils.set_random_seed(args.seed)
    defaults = training.device_defaults()
    policy = defaults.dtype_policy if args.dtype_policy == "auto" else args.dtype_policy
    jit = defaults.jit_compile if args.jit_compile is None else args.jit_compile
    keras.config.set_dtype_policy(policy)
    xla = "on" if jit else "off"
    print(f"{policy}, XLA {xla} (device defaults: {defaults.reason})")
    peak_flops, peak_source = _peak_flops(args.peak_flops, strategy)
    print(f"Peak for MFU: {peak_flops:.3g} FLOP/s ({peak_source}).")
    text, source, stem = _read_corpus(args.data)
    output = args.output or f"{args.preset}_{stem}.keras"
    with strategy.scope():
        model = zoo.from_preset(
            args.preset,
            vocabulary_size=256,
            max_sequence_length=args.sequence_length,
            dropout=args.dropout,
            # Keep case: keras-hub lowercases by default, and KJV is not lowercase.
            tokenizer=keras_hub.tokenizers.ByteTokenizer(lowercase=False),
        )
    examples, validation, count = _windows(
        model, text, args.sequence_length, args.batch_size, args.seed
    )
    if strategy.num_replicas_in_sync > 1:
        print(f"Distributing with {type(strategy).__name__} over "
              f"{strategy.num_replicas_in_sync} replicas.")  # fmt: skip
    steps = args.epochs * math.ceil(count / args.batch_size)
    print(
        f"Training preset '{args.preset}' ({model.count_params():,} parameters) on "
        f"{source}: {len(text):,} characters, {steps} steps."
    )
    flops_per_token = training.training_flops_per_token(
        model.count_params(), model.num_layers, model.hidden_dim, args.sequence_length
    )
    checkpoints = Path(args.checkpoint_dir or f"{output}.checkpoints")
    backup = checkpoints / f"backup-{distribute.task_id()}"
    started = time.perf_counter()
    history = training.train_language_model(
        model, examples, validation, epochs=args.epochs, batch_size=args.batch_size,
        learning_rate=args.learning_rate, jit_compile=jit, seed=args.seed,
        backup_dir=backup, save_freq=args.save_freq,
        verbose=1 if sys.stdout.isatty() else 2,
        callbacks=[
            # Silent: Keras' progress line of each epoch shows tokens_per_second.
            training.ThroughputCallback(
                tokens_per_step=args.batch_size * args.sequence_length,
                flops_per_token=flops_per_token, peak_flops=peak_flops, verbose=0,
            ),
            training.BestModelCheckpoint(checkpoints, enabled=distribute.is_chief()),
        ],
    )  # fmt: skip
    minutes = (time.perf_counter() - started) / 60
    if history is not None:
        tokens_per_second = history.history["tokens_per_second"][-1]
        mfu = training.format_mfu(tokens_per_second * flops_per_token, peak_flops)
        print(f"Last epoch: {tokens_per_second:,.0f} tokens/s, {mfu}.")
        validation_loss = history.history["val_loss"][-1]
    else:
        validation_loss = model.evaluate(validation, verbose=0, return_dict=True)
        validation_loss = validation_loss["loss"]
    if distribute.is_chief():
        atomic_save(model, output)
    shutil.rmtree(backup, ignore_errors=True)
    print(
        f"Saved {output} after {minutes:.1f} min: validation loss "
        f"{validation_loss:.3f} nats/byte, perplexity {math.exp(validation_loss):.2f}."
    )
    # The anchor: bzip2 -9 coding the same held-out bytes after the training ones.
    anchor = baselines.held_out_nats_per_byte(
        text, args.sequence_length, VALIDATION_FRACTION
    )
    print(f"{'validation bytes, model vs baseline':<36} nats/byte")
    print(f"{'model (' + args.preset + ')':<36} {validation_loss:9.4f}")
    print(f"{'bzip2 -9 given the training text':<36} {anchor:9.4f}")
    if args.samples:
        for prompt in args.prompt or ["And God said", "Moses went"]:
            room = model.max_sequence_length - len(model.tokenizer(prompt))
            sample = model.generate(
                prompt, max_new_tokens=min(args.max_new_tokens, room),
                sampler="top_k", top_k=10, temperature=0.8, seed=args.seed,
            )  # fmt: skip
            print(f"\n>>> {sample}")


def _peak_flops(peak_flops, strategy):
    """The peak FLOP/s of all replicas together, and where it comes from."""
    if peak_flops is not None:
        return peak_flops, "--peak-flops"
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


def _sampler_settings(sampler, args):
    """The settings that `sampler` reads, from the flags (None: the model's
    default sampler)."""
    settings = {} if sampler is None else {"sampler": sampler}
    if args.seed is not None:
        settings["seed"] = args.seed
    if sampler in ("random", "top_k", "top_p"):
        settings["temperature"] = args.temperature
    if sampler in ("top_k", "top_p"):
        settings[sampler] = getattr(args, sampler)
    if sampler == "beam" or getattr(args, "num_beams", 1) > 1:
        settings["num_beams"] = args.num_beams
    # Logit processors and stop strings (issue 40 item 8); min-p samples only.
    if getattr(args, "repetition_penalty", None) is not None:
        settings["repetition_penalty"] = args.repetition_penalty
    if getattr(args, "min_p", None) is not None and sampler in SAMPLING:
        settings["min_p"] = args.min_p
    if getattr(args, "stop", None):
        settings["stop_strings"] = args.stop
    return settings


SAMPLING = ("random", "top_k", "top_p")


def _add_processor_options(p):
    p.add_argument("--repetition-penalty", type=float, help="HF's (1: off)")
    p.add_argument("--min-p", type=float, help="with a sampling --sampler")
    p.add_argument("--stop", action="append", help="a stop string (repeatable)")


def _generate_settings(model, args):
    """`_sampler_settings` for `model.generate`, checked against what it
    takes, and whether to stream (sampling prints each new piece as it
    comes; beam search decides at the end). A causal LM samples top-k by
    default, a translator decodes greedily."""
    accepted = inspect.signature(model.generate).parameters
    translates = type(model).__name__ in SEQ2SEQ_CLASSES
    default = None if translates or "top_k" not in accepted else "top_k"
    sampler = args.sampler or default
    settings = _sampler_settings(sampler, args)
    refused = [name for name in settings if name not in accepted]
    if refused:
        flags = ", ".join("--" + name.replace("_", "-") for name in refused)
        raise SystemExit(
            f"keras-tfm: {type(model).__name__}.generate takes no {flags}; "
            "try --sampler greedy."
        )
    if "stream" in accepted and "num_beams" not in settings:
        settings["stream"] = True
    return settings


def generate(args):
    model = _store_weights(_language_model(args.model), args.weights)
    settings = _generate_settings(model, args)
    for prompt in args.prompt:
        output = model.generate(prompt, max_new_tokens=args.max_new_tokens, **settings)
        if not settings.get("stream"):
            print(output)
            continue
        if type(model).__name__ not in SEQ2SEQ_CLASSES:
            print(prompt, end="", flush=True)  # a translation does not repeat it
        for piece in output:
            print(piece, end="", flush=True)
        print()


def evaluate(args):
    from keras_tfm import training

    model = _language_model(args.model, needs="evaluate")
    text, source, _ = _read_corpus(args.data)
    length = args.sequence_length or model.max_sequence_length
    _, validation = _datasets(model, text, length, args.batch_size, args.seed)
    model.compile(loss=training.TokenCrossEntropy(ignore_class=None))
    loss = model.evaluate(validation, return_dict=True, verbose=0)["loss"]
    print(
        f"{source}, validation split: loss {loss:.4f}, perplexity {math.exp(loss):.3f}"
    )


def chat(args):
    model = _store_weights(_language_model(args.model, needs="chat"), args.weights)
    # Stop strings are checked inside the compiled loop, which does not stream.
    pieces = model.chat(
        args.message,
        max_new_tokens=args.max_new_tokens,
        stream=not args.stop,
        **_sampler_settings(args.sampler, args),
    )
    pieces = [pieces] if args.stop else pieces
    for piece in pieces:
        print(piece, end="", flush=True)
    print()


def classify(args):
    model = _language_model(args.model, needs="classify")
    for text, label in zip(args.text, model.classify(args.text), strict=True):
        print(f"{label}\t{text}")


# What each kind of preset is for: (class name, has weights) -> command.
COMMANDS = {
    ("CausalLM", False): "keras-tfm train --preset {name}",
    ("CausalLM", True): 'keras-tfm generate {name} --prompt "..."',
    ("EncoderClassifier", True): 'keras-tfm classify {name} --text "..."',
    **{
        (name, True): 'keras-tfm generate {name} --prompt "..." --sampler greedy'
        for name in SEQ2SEQ_CLASSES
    },
}
CHAT_COMMAND = 'keras-tfm chat "..." --model {name}'
# The class a converted checkpoint's loader builds (zoo/<name>/source.json).
LOADER_CLASSES = {"gguf_llama": "CausalLM", "sentence_encoder": "SentenceEncoder"}


def preset_row(name):
    """(name, weights, task, parameters, command) of a preset, read from its
    folder and card without building it."""
    from keras_tfm import zoo

    folder, weights = zoo.preset_dir(name), zoo.preset_weights(name)
    if (folder / "source.json").is_file():
        loader = json.loads((folder / "source.json").read_text())["loader"]
        task = LOADER_CLASSES.get(loader, loader)
    else:
        task = json.loads((folder / "config.json").read_text())["class_name"]
        task = task.removeprefix("keras_tfm>")
    found = re.search(r"^\| *Parameters *\| *([\d,]+)", zoo.preset_card(name), re.M)
    command = COMMANDS.get((task, weights != "none"), "Python: zoo.from_preset")
    if weights == "pretrained" and task == "CausalLM":
        command = CHAT_COMMAND  # the converted instruct checkpoint
    parameters = found[1] if found else "?"
    return name, weights, task, parameters, command.format(name=name)


def presets(args):
    from keras_tfm import zoo

    rows = [preset_row(name) for name in zoo.list_presets()]
    header = ("preset", "weights", "task", "parameters", "command")
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(4)]
    for row in [header, *rows]:
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
        print("  ".join([*cells, row[4]]))


MODEL_HELP = "a .keras file, or a preset name (`keras-tfm presets`)"


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
    p.add_argument(
        "--output",
        help="the .keras file to write (default: <preset>_<text>.keras, "
        f"e.g. gpt_micro_{SHIPPED_TEXT_NAME}.keras)",
    )
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
    p.add_argument("model", help=MODEL_HELP)
    p.add_argument("--prompt", action="append", required=True)
    p.add_argument("--max-new-tokens", type=_positive_int, default=200)
    p.add_argument(
        "--sampler",
        choices=["greedy", "random", "top_k", "top_p", "beam"],
        help="default: top_k where the model's generate has it, else its own",
    )
    p.add_argument("--top-k", type=_positive_int, default=10)
    p.add_argument("--top-p", type=float, default=0.9)
    p.add_argument("--temperature", type=float, default=0.8)
    p.add_argument("--num-beams", type=_positive_int, default=1)
    p.add_argument("--seed", type=int)
    _add_processor_options(p)
    _add_weights_option(p)
    p.set_defaults(run=generate)

    p = commands.add_parser(
        "evaluate", parents=[common], help="validation loss and perplexity"
    )
    p.add_argument("model", help=MODEL_HELP)
    p.add_argument("--data", help="a UTF-8 text file (default: the shipped KJV text)")
    p.add_argument("--sequence-length", type=_positive_int)
    p.add_argument("--batch-size", type=_positive_int, default=32)
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(run=evaluate)

    p = commands.add_parser(
        "chat", parents=[common], help="ask an instruct model (SmolLM2 by default)"
    )
    p.add_argument("message", help="the user's message")
    p.add_argument(
        "--model",
        "--preset",
        default="smollm2_135m_instruct",
        help=MODEL_HELP + " (default: %(default)s)",
    )
    p.add_argument("--max-new-tokens", type=_positive_int, default=256)
    p.add_argument("--sampler", default="greedy", choices=["greedy", "top_p"])
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--top-p", type=float, default=0.9)
    p.add_argument("--seed", type=int)
    _add_processor_options(p)
    _add_weights_option(p)
    p.set_defaults(run=chat)

    p = commands.add_parser(
        "classify", parents=[common], help="the class of each text (a classifier)"
    )
    p.add_argument("model", help=MODEL_HELP)
    p.add_argument("--text", action="append", required=True)
    p.set_defaults(run=classify)

    p = commands.add_parser(
        "presets",
        parents=[common],
        help="list the zoo's presets: weights (pretrained, trained here or "
        "none), task, parameters and the command that fits each",
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

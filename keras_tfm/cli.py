"""The `keras-tfm` command: train, generate, evaluate, chat, classify, presets,
cache.

keras-tfm train            # gpt_micro, byte-level BPE, on the shipped KJV
keras-tfm generate gpt_micro_kjv.keras --prompt "And God said"
keras-tfm evaluate gpt_micro_kjv.keras
keras-tfm generate kjv_gpt --prompt "And God said"      # a preset, alike
keras-tfm presets          # each preset's task, parameters and command

A command's model is a `.keras` file if that path exists, else a preset
name. This module parses and dispatches; the training recipe is
`keras_tfm.training.train_on_text`.

The `keras-tfm` console script starts in `keras_tfm_launcher`, which silences
TensorFlow's start-up logs before TensorFlow is imported; `--verbose` keeps
them.
"""

import argparse
import inspect
import json
import math
import re
from pathlib import Path

from keras_tfm.serving import command as serving_command
from keras_tfm_lite import chat_command

# `train` writes <preset>_<text>.keras: gpt_micro_kjv.keras by default, named
# for what it is (not kjv_gpt.keras: the zoo's kjv_gpt is another model).
SHIPPED_TEXT_NAME = "kjv"


def _positive_int(text):
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def _read_corpus(path):
    """(text, where it comes from, a short name for the output file)."""
    from keras_tfm.datasets import load_default_corpus

    if path is None:
        shipped = "the shipped King James Bible"
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


def resolve_model(reference, weights=None):
    """The model a command names: a `.keras` file if `reference` is a path
    that exists, else a preset of the zoo (`keras_tfm.zoo.named_model`);
    neither: a one-line error. A GGUF preset loads `weights="int8_blocks"`
    as the file's blocks."""
    from keras_tfm.zoo import list_presets
    from keras_tfm.zoo.named_model import load_named_model

    try:
        return load_named_model(reference, weights)
    except ValueError as error:
        if reference in list_presets() and not Path(reference).is_file():
            raise  # a preset's own error, with its traceback
        raise SystemExit(f"keras-tfm: {error}") from None


# What each command takes, for the error of `_language_model`.
WANTED = {
    "generate": "a keras-tfm model with `generate` and a tokenizer",
    "evaluate": "a keras-tfm CausalLM with a tokenizer",
    "chat": "a keras-tfm CausalLM with a tokenizer and chat template",
    "classify": "a keras-tfm classifier with a tokenizer",
}


# Encoder-decoder classes (a Seq2SeqLM is also a CausalLM): not for `evaluate`.
SEQ2SEQ_CLASSES = ("Seq2SeqLM", "Seq2SeqTransformer")


def _language_model(reference, needs="generate", weights=None):
    """`resolve_model(reference, weights)`, checked to be a keras-tfm model
    with a tokenizer and the method `needs` (a one-line error otherwise)."""
    from keras_tfm import models

    model = resolve_model(reference, weights)
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


WEIGHTS = ("float32", "int8", "bfloat16", "int8_blocks")
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
        elif weights == "int8_blocks" and model.quantized_to != weights:
            model.cast_weights(weights)
    except ValueError as error:
        raise SystemExit(f"keras-tfm: --weights {weights}: {error}") from None
    return model


def _add_decoding_options(parser, temperature):
    """The options `generate` and `chat` share: sampling and `--weights`."""
    parser.add_argument("--temperature", type=float, default=temperature)
    parser.add_argument("--top-p", type=float, default=0.9)
    parser.add_argument("--seed", type=int)
    _add_processor_options(parser)
    _add_weights_option(parser)


def _add_weights_option(parser):
    parser.add_argument(
        "--weights",
        default="float32",
        choices=WEIGHTS,
        help="store the weight matrices as weight-only int8 or bfloat16: "
        "faster decoding on a CPU, logits within a few percent; int8_blocks: "
        "a GGUF file's Q4/Q8 blocks as they are (its float32 logits, a "
        "quarter of the memory)",
    )


def _vocabulary_size(text):
    value = _positive_int(text)
    if value < 256:
        raise argparse.ArgumentTypeError(
            f"must be 256 (bytes) or more (byte-level BPE), got {text}"
        )
    return value


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


def train(args):
    from keras_tfm import distribute

    # First: a multi-worker strategy must exist before any TensorFlow work.
    strategy = distribute.strategy_from_flags(args.strategy, tpu=args.tpu)

    from keras_tfm import training, zoo

    def build_model(train_text):
        tokenizer = training.text_tokenizer(train_text, args.vocabulary_size)
        return zoo.from_preset(
            args.preset, vocabulary_size=tokenizer.vocabulary_size(),
            dropout=args.dropout, max_sequence_length=args.sequence_length,
            tokenizer=tokenizer,
        )  # fmt: skip

    text, source, stem = _read_corpus(args.data)
    training.train_on_text(
        build_model, text, name=args.preset, source=source, strategy=strategy,
        output=args.output or f"{args.preset}_{stem}.keras",
        epochs=args.epochs, batch_size=args.batch_size,
        sequence_length=args.sequence_length, learning_rate=args.learning_rate,
        dtype_policy=args.dtype_policy, jit_compile=args.jit_compile,
        peak_flops=args.peak_flops, checkpoint_dir=args.checkpoint_dir,
        save_freq=args.save_freq, seed=args.seed,
        prompts=(args.prompt or None) if args.samples else [],
        max_new_tokens=args.max_new_tokens,
    )  # fmt: skip


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
    validation = training.held_out_batches(
        model, text, length, args.batch_size, args.seed
    )
    model.compile(loss=training.TokenCrossEntropy(ignore_class=None))
    loss = model.evaluate(validation, return_dict=True, verbose=0)["loss"]
    print(
        f"{source}, validation split: loss {loss:.4f}, perplexity {math.exp(loss):.3f}"
    )


def chat(args):
    model = _language_model(args.model, needs="chat", weights=args.weights)
    model = _store_weights(model, args.weights)
    settings = _sampler_settings(args.sampler, args)
    if args.message is None:  # an interactive conversation
        from keras_tfm.interactive_chat import converse

        converse(model, max_new_tokens=args.max_new_tokens, **settings)
        return
    # Streamed, stop strings included (checked on the host, never shown).
    pieces = model.chat(
        args.message, max_new_tokens=args.max_new_tokens, stream=True, **settings
    )
    for piece in pieces:
        print(piece, end="", flush=True)
    print()
    from keras_tfm.chat_entry_writer import start_chat_entry

    # The next `chat` with this model answers from LiteRT, without TensorFlow.
    start_chat_entry(model, args.model, args.weights, settings)


def cache(args):
    from keras_tfm_lite import user_cache

    folder = user_cache.cache_directory()
    if folder is None:
        print(f"caching is off ({user_cache.CACHE_ENV}={user_cache.OFF})")
    elif args.action == "clear":
        print(f"removed {folder} ({user_cache.clear() / 1e6:.1f} MB)")
        return
    else:
        print(f"cache folder: {folder} (set by {user_cache.CACHE_ENV})")
    for name, (entries, size) in user_cache.info().items():
        print(f"{name}: {entries} entries, {size / 1e6:.1f} MB")


def export(args):
    from keras_tfm.export.command import run_export, saved_model_options

    saved_model_options(args)  # a bad flag is reported before the model loads
    model = resolve_model(args.model)
    if not args.litert:  # LiteRT quantizes in its converter
        model = _store_weights(model, args.weights)
    run_export(model, args)


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


def serve(args):
    model = _store_weights(resolve_model(args.model), args.weights)
    serving_command.run(args, model)


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
    p.add_argument(
        "--vocabulary-size",
        type=_vocabulary_size,
        default=2048,
        help="tokens of the byte-level BPE learned on the training text "
        "(default 2048); 256: one token a byte",
    )
    p.add_argument("--epochs", type=_positive_int, default=3)  # ~500 steps each (KJV)
    p.add_argument("--batch-size", type=_positive_int, default=16)
    p.add_argument("--sequence-length", type=_positive_int, default=128)
    p.add_argument("--learning-rate", type=_positive_float, default=3e-3)
    p.add_argument("--dropout", type=float, default=0.1)
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
    p.add_argument("--num-beams", type=_positive_int, default=1)
    _add_decoding_options(p, temperature=0.8)
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
    p.add_argument(
        "message",
        nargs="?",
        help="the user's message (none: an interactive conversation, Ctrl-D ends it)",
    )
    p.add_argument(
        "--model",
        "--preset",
        default=chat_command.DEFAULT_MODEL,
        help=MODEL_HELP + " (default: %(default)s)",
    )
    p.add_argument(
        "--max-new-tokens",
        type=_positive_int,
        default=chat_command.DEFAULT_MAX_NEW_TOKENS,
    )
    p.add_argument(
        "--sampler",
        choices=["greedy", "top_p"],
        help="default: the preset's settings (greedy unless its "
        "generation_config.json says otherwise)",
    )
    _add_decoding_options(p, temperature=1.0)
    p.set_defaults(run=chat)

    p = commands.add_parser(
        "classify", parents=[common], help="the class of each text (a classifier)"
    )
    p.add_argument("model", help=MODEL_HELP)
    p.add_argument("--text", action="append", required=True)
    p.set_defaults(run=classify)

    p = commands.add_parser(
        "serve",
        parents=[common],
        help="an OpenAI-compatible HTTP server that batches concurrent "
        "requests (docs/serving.md)",
    )
    serving_command.add_arguments(p)
    _add_weights_option(p)
    p.set_defaults(run=serve)

    p = commands.add_parser(
        "cache",
        parents=[common],
        help="show or clear the cache of compiled code and converted models",
    )
    p.add_argument("action", choices=["info", "clear"])
    p.set_defaults(run=cache)

    p = commands.add_parser(
        "export",
        parents=[common],
        help="write a SavedModel whose signatures take strings (docs/deployment.md)",
    )
    p.add_argument("model", help=MODEL_HELP)
    p.add_argument("directory", help="the SavedModel folder to write")
    p.add_argument("--overwrite", action="store_true", help="replace a folder")
    p.add_argument("--max-new-tokens", type=int, default=32, help="the answers' length")
    p.add_argument(
        "--num-beams",
        type=int,
        default=1,
        help="translate's beam width (1: greedy; translate_with_options "
        "takes 1 or this width, 4 when it is 1)",
    )
    p.add_argument(
        "--length-penalty",
        type=float,
        default=0.0,
        help="translate's beam length penalty (the translator's card: 1.5)",
    )
    p.add_argument(
        "--litert", action="store_true", help="an encoder task as model.tflite"
    )
    _add_weights_option(p)
    p.set_defaults(run=export)

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

"""The `keras-tfm` command: train, generate, evaluate, chat, classify, serve,
export, bench, presets, cache.

keras-tfm train            # gpt_micro, byte-level BPE, on the shipped KJV
keras-tfm generate gpt_micro_kjv.keras --prompt "And God said"
keras-tfm evaluate gpt_micro_kjv.keras
keras-tfm generate kjv_gpt --prompt "And God said"      # a preset, alike
keras-tfm presets          # each preset's task, parameters and command

A command's model is a `.keras` file if that path exists, else a preset
name. This package parses and dispatches: each command is a module with
`HELP`, `add_arguments(parser)` and `run(args)`; the training recipe is
`keras_tfm.training.train_on_text`.

The `keras-tfm` console script starts in `keras_tfm.launcher`, which silences
TensorFlow's start-up logs before TensorFlow is imported; `--verbose` keeps
them.
"""

import argparse
import re

from keras_tfm.cli import (
    bench,
    cache,
    chat,
    classify,
    evaluate,
    export,
    generate,
    presets,
    serve,
    train,
)
from keras_tfm.cli.arguments import SHIPPED_TEXT_NAME
from keras_tfm.cli.loading import resolve_model

# In the order `keras-tfm --help` lists them.
COMMANDS = {
    "train": train,
    "generate": generate,
    "evaluate": evaluate,
    "chat": chat,
    "classify": classify,
    "serve": serve,
    "cache": cache,
    "export": export,
    "bench": bench,
    "presets": presets,
}

__all__ = ["COMMANDS", "SHIPPED_TEXT_NAME", "build_parser", "main", "resolve_model"]


def build_parser():
    """The `keras-tfm` parser: one subcommand per module of `COMMANDS`."""
    parser = argparse.ArgumentParser(
        prog="keras-tfm", description=__doc__.split("\n")[0]
    )
    commands = parser.add_subparsers(dest="command", required=True)
    # Read by keras_tfm.launcher before TensorFlow is imported; listed here
    # so that every command accepts it and --help shows it.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--verbose",
        action="store_true",
        help="show TensorFlow's start-up and C++ logs and dependencies' warnings",
    )
    for name, module in COMMANDS.items():
        p = commands.add_parser(name, parents=[common], help=module.HELP)
        module.add_arguments(p)
        p.set_defaults(run=module.run, flags=_flags(p))
    return parser


def _flags(parser):
    """{keyword: (its flag, whether the flag takes a value)} of `parser`'s
    options, e.g. {"max_new_tokens": ("--max-new-tokens", True)}."""
    return {
        action.dest: (max(action.option_strings, key=len), action.nargs != 0)
        for action in parser._actions
        if action.option_strings and action.dest not in ("help", "verbose")
    }


def in_flags(message, flags):
    """An error of the Python API, `message`, with each keyword argument
    that a flag sets written as that flag.

    Example:
    >>> in_flags("pass overwrite=True. Received: max_new_tokens=200",
    ...          {"overwrite": ("--overwrite", False),
    ...           "max_new_tokens": ("--max-new-tokens", True)})
    'pass --overwrite. Received: --max-new-tokens 200'
    """
    for keyword, (flag, takes_value) in flags.items():
        name = rf"(?<![\w.-]){keyword}"
        if not takes_value:
            message = re.sub(rf"{name}=True\b", flag, message)
        message = re.sub(rf"{name}=", f"{flag} ", message)
        message = re.sub(rf"`{keyword}`", f"`{flag}`", message)
    return message


def main(argv=None):
    # `--verbose` (and quiet by default) is handled by keras_tfm.launcher:
    # here TensorFlow is already imported, too late to configure its logs.
    args = build_parser().parse_args(argv)
    try:
        args.run(args)
    except ValueError as error:
        raise SystemExit(f"keras-tfm: {in_flags(str(error), args.flags)}") from None

"""The decoding options `generate` and `chat` share: sampling, logit
processors, stop strings and `--weights`.

A flag given goes to the model as the setting of the same name and is
checked as the Python API checks it (`check_settings`): a setting that the
chosen sampler does not read is refused, naming the flag, never dropped. A
flag's default (`--temperature`, `--top-p`, `--top-k`, `--num-beams`) is
sent only with the sampler it is for (`DEFAULT_FOR`), chosen by
`--sampler` or by the command.
"""

from keras_tfm.cli.loading import add_weights_option
from keras_tfm.generation.generation_config import configs_for, request_base

FLAGS = {
    "temperature": "--temperature",
    "top_k": "--top-k",
    "top_p": "--top-p",
    "num_beams": "--num-beams",
    "seed": "--seed",
    "repetition_penalty": "--repetition-penalty",
    "min_p": "--min-p",
    "stop_strings": "--stop",
}
"""The setting each decoding flag sets."""


SAMPLING = ("random", "top_k", "top_p")

DEFAULT_FOR = {
    "temperature": SAMPLING,
    "top_k": ("top_k",),
    "top_p": ("top_p",),
    "num_beams": ("beam",),
}
"""The samplers a flag's default is sent with (top_p sampling reads a top_k
too, but the CLI's --top-k default is for top_k sampling only)."""


def add_decoding_options(parser, temperature, **defaults):
    """The options `generate` and `chat` share: sampling and `--weights`.

    `temperature` and `defaults` (setting: value): what is sent for a flag
    not given, with the samplers `DEFAULT_FOR` names.
    """
    parser.add_argument(
        "--temperature", type=float,
        help=f"with a sampling --sampler (default {temperature})",
    )  # fmt: skip
    parser.add_argument(
        "--top-p", type=float, help="with --sampler top_p (default 0.9)"
    )
    parser.add_argument("--seed", type=int)
    parser.set_defaults(
        sampler_defaults={"temperature": temperature, "top_p": 0.9, **defaults}
    )
    add_processor_options(parser)
    add_weights_option(parser)


def add_processor_options(parser):
    parser.add_argument("--repetition-penalty", type=float, help="HF's (1: off)")
    parser.add_argument("--min-p", type=float, help="with a sampling --sampler")
    parser.add_argument("--stop", action="append", help="a stop string (repeatable)")


def sampler_settings(sampler, args):
    """The settings of the flags given, and the defaults of the flags for
    `sampler` (None: the model's default sampler, no default sent)."""
    settings = {} if sampler is None else {"sampler": sampler}
    given = {
        name: getattr(args, "stop" if name == "stop_strings" else name, None)
        for name in FLAGS
    }
    settings.update({name: value for name, value in given.items() if value is not None})
    for name, value in getattr(args, "sampler_defaults", {}).items():
        if sampler in DEFAULT_FOR[name] and name not in settings:
            settings[name] = value
    return settings


def check_settings(model, settings):
    """Refuses, naming the flags, settings that `model.generate` would
    refuse: the Python API's own check (`configs_for` over the model's
    `generation_config`), so a flag the sampler does not read is an error
    here too, not a setting silently dropped."""
    sampler = settings.get("sampler")
    rest = {k: v for k, v in settings.items() if k != "sampler"}
    default = getattr(model, "generation_config", None)
    base = request_base(default, sampler, rest.get("num_beams"), None)
    try:
        configs_for(sampler, rest, base, 1)
    except ValueError as error:
        from keras_tfm.cli import in_flags  # the package imports this module

        message = str(error)
        flags = [
            FLAGS[name]
            for name in rest
            if name in FLAGS and (f"`{name}`" in message or f"{name}=" in message)
        ]
        named = ", ".join(flags) or "the decoding flags"
        if "not read" in message:
            chosen = sampler or getattr(default, "sampler", None) or "greedy"
            named += f" with the {chosen} sampler (choose one with --sampler)"
        written = {name: (flag, True) for name, flag in FLAGS.items()}
        raise SystemExit(f"keras-tfm: {named}: {in_flags(message, written)}") from None

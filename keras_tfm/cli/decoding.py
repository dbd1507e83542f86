"""The decoding options `generate` and `chat` share: sampling, logit
processors, stop strings and `--weights`.

A flag given goes to the model as the setting of the same name and is
checked as the Python API checks it (`check_settings`): a setting that the
chosen sampler does not read is refused, naming the flag, never dropped. A
flag's default (`--temperature`, `--top-p`, `--top-k`, `--num-beams`) is
sent only with the sampler it is for, chosen by `--sampler` or by the
command (`keras_tfm.lite.decoding_flags`, which the LiteRT chat reads too).
"""

from keras_tfm.cli.loading import add_weights_option
from keras_tfm.generation.generation_config import single_config
from keras_tfm.lite.decoding_flags import DEFAULT_TOP_P, FLAGS


def add_decoding_options(parser, temperature, weights=None, **defaults):
    """The options `generate` and `chat` share: sampling and `--weights`.

    `temperature` and `defaults` (setting: value): what is sent for a flag
    not given, with the samplers `decoding_flags.DEFAULT_FOR` names.
    `weights`: `add_weights_option`'s arguments, if not its defaults.
    """
    parser.add_argument(
        "--temperature", type=float,
        help=f"with a sampling --sampler (default {temperature})",
    )  # fmt: skip
    parser.add_argument(
        "--top-p", type=float, help=f"with --sampler top_p (default {DEFAULT_TOP_P})"
    )
    parser.add_argument("--seed", type=int)
    parser.set_defaults(
        sampler_defaults={
            "temperature": temperature,
            "top_p": DEFAULT_TOP_P,
            **defaults,
        }
    )
    add_processor_options(parser)
    add_weights_option(parser, **(weights or {}))


def add_processor_options(parser):
    parser.add_argument("--repetition-penalty", type=float, help="HF's (1: off)")
    parser.add_argument("--min-p", type=float, help="with a sampling --sampler")
    parser.add_argument("--stop", action="append", help="a stop string (repeatable)")


def check_settings(model, settings):
    """Refuses, naming the flags, settings that `model.generate` would
    refuse: the Python API's own check (`single_config` over the model's
    `generation_config`), so a flag the sampler does not read is an error
    here too, not a setting silently dropped."""
    sampler = settings.get("sampler")
    rest = {k: v for k, v in settings.items() if k != "sampler"}
    default = getattr(model, "generation_config", None)
    try:
        single_config(default, sampler, rest)
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

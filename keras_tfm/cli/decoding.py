"""The decoding options `generate` and `chat` share: sampling, logit
processors, stop strings and `--weights`."""

from keras_tfm.cli.loading import add_weights_option

SAMPLING = ("random", "top_k", "top_p")


def add_decoding_options(parser, temperature):
    """The options `generate` and `chat` share: sampling and `--weights`."""
    parser.add_argument("--temperature", type=float, default=temperature)
    parser.add_argument("--top-p", type=float, default=0.9)
    parser.add_argument("--seed", type=int)
    add_processor_options(parser)
    add_weights_option(parser)


def add_processor_options(parser):
    parser.add_argument("--repetition-penalty", type=float, help="HF's (1: off)")
    parser.add_argument("--min-p", type=float, help="with a sampling --sampler")
    parser.add_argument("--stop", action="append", help="a stop string (repeatable)")


def sampler_settings(sampler, args):
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

"""`keras-tfm generate MODEL --prompt ...`: continue prompts (a causal LM)
or translate them (a translator), streamed where the sampler allows."""

import inspect

from keras_tfm.cli import budget, loading
from keras_tfm.cli.arguments import MODEL_HELP, positive_int
from keras_tfm.cli.decoding import add_decoding_options, check_settings
from keras_tfm.cli.loading import SEQ2SEQ_CLASSES
from keras_tfm.lite.decoding_flags import sampler_settings

HELP = "continue prompts with a saved model"

MAX_NEW_TOKENS = 200
"""`--max-new-tokens` unless the model holds fewer (`max_new_tokens`)."""


def add_arguments(p):
    p.add_argument("model", help=MODEL_HELP)
    p.add_argument("--prompt", action="append", required=True)
    p.add_argument(
        "--max-new-tokens",
        type=positive_int,
        help=f"default: {MAX_NEW_TOKENS}, or the positions the model has left "
        "after the prompt where fewer (learned positions, a translator)",
    )
    p.add_argument(
        "--sampler",
        choices=["greedy", "random", "top_k", "top_p", "beam"],
        help="default: top_k where the model's generate has it, else its own",
    )
    p.add_argument(
        "--top-k", type=positive_int, help="with --sampler top_k (default 10)"
    )
    p.add_argument("--num-beams", type=positive_int, help="beam search if > 1")
    add_decoding_options(p, temperature=0.8, top_k=10, num_beams=1)


def generate_settings(model, args):
    """`sampler_settings` for `model.generate`, checked against what it
    takes, and whether to stream (sampling prints each new piece as it
    comes; beam search decides at the end). A causal LM samples top-k by
    default, a translator decodes greedily."""
    accepted = inspect.signature(model.generate).parameters
    translates = type(model).__name__ in SEQ2SEQ_CLASSES
    default = None if translates or "top_k" not in accepted else "top_k"
    sampler = args.sampler or default
    settings = sampler_settings(sampler, args)
    refused = [name for name in settings if name not in accepted]
    if refused:
        flags = ", ".join("--" + name.replace("_", "-") for name in refused)
        raise SystemExit(
            f"keras-tfm: {type(model).__name__}.generate takes no {flags}; "
            "try --sampler greedy."
        )
    if "generation_config" in accepted:  # checked as `generate` checks it
        check_settings(model, settings)
    if "stream" in accepted and "num_beams" not in settings:
        settings["stream"] = True
    return settings


def max_new_tokens(model, args):
    """`--max-new-tokens` if it fits, else a one-line error; without it
    `MAX_NEW_TOKENS`, capped by what the longest prompt leaves of the
    model's positions (learned positions; a translator's after its start
    token), said on stderr (`budget.fit_to_model`)."""
    return budget.fit_to_model(model, args.prompt, args.max_new_tokens, MAX_NEW_TOKENS)


def run(args):
    model = loading.store_weights(loading.language_model(args.model), args.weights)
    settings = generate_settings(model, args)
    limit = max_new_tokens(model, args)
    for prompt in args.prompt:
        output = model.generate(prompt, max_new_tokens=limit, **settings)
        if not settings.get("stream"):
            print(output)
            continue
        if type(model).__name__ not in SEQ2SEQ_CLASSES:
            print(prompt, end="", flush=True)  # a translation does not repeat it
        for piece in output:
            print(piece, end="", flush=True)
        print()

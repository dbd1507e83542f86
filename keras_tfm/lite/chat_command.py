"""`keras-tfm chat "..."` from a cached LiteRT entry, before TensorFlow loads.

`keras_tfm.launcher` calls `answer_from_cache(argv)` first for a `chat`
command; it answers only when the command asks for nothing the entry cannot
give (its int8 or float32 step, greedy decoding or sampling without logit
processors, a buffer long enough), and otherwise returns False without
printing anything, and the command runs
through TensorFlow (`keras_tfm.cli`), which writes the entry for next time
(`keras_tfm.chat.entry_writer`). Without a message, the conversation
(`keras_tfm.lite.repl`) runs on the entry, each turn running only what its
cache does not hold; once the conversation outgrows the entry's buffer, it
goes on through TensorFlow (`continue_with`, given by the launcher), whose
context is the model's own.

The options are parsed here with a parser of their own because
`keras_tfm.cli` builds its parser from the commands' modules, which import
Keras and TensorFlow; the defaults are shared (`DEFAULT_MODEL`,
`DEFAULT_MAX_NEW_TOKENS`, `DEFAULT_TEMPERATURE`), and the settings are
resolved against the model's own (`entry.json`) by the engine's rules
(`keras_tfm.generation.generation_config`), which import no Keras: a
setting TensorFlow would refuse is left to TensorFlow to refuse.

Example:
>>> answer_from_cache(["chat", "--repetition-penalty", "1.2", "Hi"])  # no
False
"""

import argparse
import sys

from keras_tfm.lite.chat_entries import WEIGHTS, default_weights
from keras_tfm.lite.decoding_flags import DEFAULT_TOP_P, sampler_settings

DEFAULT_MODEL = "smollm2_135m_instruct"
DEFAULT_MAX_NEW_TOKENS = 256
DEFAULT_TEMPERATURE = 1.0
"""`keras-tfm chat --sampler top_p`'s temperature unless `--temperature`."""
WEIGHTS_HELP = (
    "the weights the chat decodes with (default: int8 for a preset that "
    "keeps a LiteRT step template, SmolLM2: its int8 LiteRT step, within "
    "llama.cpp's quality gate, docs/benchmarks/decoding.md; float32 for any other "
    "model); with TensorFlow, as `generate --weights`"
)


class _QuietParser(argparse.ArgumentParser):
    """Raises instead of printing a usage error: `keras_tfm.cli` reports it."""

    def error(self, message):
        raise ValueError(message)


def _parser():
    parser = _QuietParser(add_help=False, exit_on_error=False)
    parser.add_argument("message", nargs="?")
    parser.add_argument("--model", "--preset", default=DEFAULT_MODEL)
    parser.add_argument("--max-new-tokens", type=int, default=DEFAULT_MAX_NEW_TOKENS)
    parser.add_argument("--sampler", choices=["greedy", "top_p"])
    parser.add_argument("--temperature", type=float)
    parser.add_argument("--top-p", type=float)
    parser.add_argument("--min-p", type=float)
    parser.add_argument("--seed", type=int)
    parser.add_argument("--weights", choices=WEIGHTS)
    parser.add_argument("--stop", action="append")
    parser.add_argument("--verbose", action="store_true")
    parser.set_defaults(
        sampler_defaults={"temperature": DEFAULT_TEMPERATURE, "top_p": DEFAULT_TOP_P}
    )
    return parser


def _parse(args):
    """The chat options, or None for a command the cache cannot answer."""
    try:
        options, unknown = _parser().parse_known_args(args)
    except (argparse.ArgumentError, ValueError):
        return None
    if unknown or options.max_new_tokens <= 0 or "-h" in args or "--help" in args:
        return None
    options.weights = options.weights or default_weights(options.model)
    return options


def decoding_config(options, entry):
    """The `GenerationConfig` the command decodes with, resolved over the
    model's default as `CausalLM.chat` resolves it; None if TensorFlow must
    answer (a setting it refuses, beam search, a logit processor)."""
    from keras_tfm.generation.generation_config import GenerationConfig, single_config
    from keras_tfm.lite.sampling import draws

    settings = sampler_settings(options.sampler, options)
    sampler = settings.pop("sampler", None)
    try:
        default = entry["generation_config"]
        default = None if default is None else GenerationConfig.from_dict(default)
        config = single_config(default, sampler, settings)
    except (KeyError, TypeError, ValueError):
        return None
    return config if draws(config) else None


OUTGROWN = (
    "keras-tfm: the conversation outgrew the LiteRT copy's {positions} "
    "positions; it goes on through TensorFlow (loading the model)."
)
"""What the conversation says once it moves to TensorFlow."""


def answer_from_cache(argv, root=None, continue_with=None):
    """Prints the answer of `keras-tfm chat ...` from the cache; whether it did.

    `argv`: the command's arguments (`["chat", message, options...]`; no
    message: a conversation, if `continue_with` is given).
    `root`: the cache folder (default `user_cache.cache_directory()`).
    `continue_with`: `argv -> stream(messages, max_new_tokens)`, the
    TensorFlow session that takes over a conversation that no longer fits
    the entry's buffer.
    """
    if argv[:1] != ["chat"]:
        return False
    options = _parse(argv[1:])
    if options is None:
        return False
    later = None if continue_with is None else lambda: continue_with(argv)
    return answer_from_entry(options, root, later)


def answer_from_entry(options, root=None, continue_with=None):
    """Prints the answer of the chat command `options` (its parsed flags)
    from the model's entry; whether it did.

    `continue_with`: `() -> stream(messages, max_new_tokens)`, as
    `answer_from_cache`'s.
    """
    from keras_tfm.lite.chat_entries import find_entry

    found = find_entry(options.model, options.weights, root)
    if found is None:
        return False
    folder, entry = found
    config = decoding_config(options, entry)
    if config is None:
        return False
    try:
        from keras_tfm.lite.litert_chat import LiteRTChat

        chat = LiteRTChat(folder, entry)
    except (ImportError, ValueError, RuntimeError):  # e.g. litert uninstalled
        return False
    if options.message is None:
        if continue_with is None or options.max_new_tokens >= chat.buffer_length:
            return False  # no answer would fit the entry: TensorFlow throughout
        from keras_tfm.lite.repl import converse_with

        session = _CachedThenTensorFlow(chat, config, continue_with)
        converse_with(session, max_new_tokens=options.max_new_tokens)
        return True
    if not chat.fits(chat.prompt_ids(options.message), options.max_new_tokens):
        return False
    pieces = chat.chat(
        options.message,
        max_new_tokens=options.max_new_tokens,
        stop_strings=config.stop_strings,
        stream=True,
        config=config,
    )
    for piece in pieces:
        print(piece, end="", flush=True)
    print()
    return True


class _CachedThenTensorFlow:
    """A conversation on a LiteRT entry while it fits the entry's buffer, then
    on the TensorFlow session `load()` returns (for the rest of it), both
    decoding with `config` (the TensorFlow session with the same flags)."""

    def __init__(self, chat, config, load):
        self.chat, self.config, self.load, self.tensorflow = chat, config, load, None

    def stream(self, messages, max_new_tokens):
        if self.tensorflow is None:
            prompt = self.chat.prompt_ids(messages)
            if self.chat.fits(prompt, max_new_tokens):
                return self.chat.stream(
                    messages, max_new_tokens, self.config.stop_strings, self.config
                )
            print(OUTGROWN.format(positions=self.chat.buffer_length), file=sys.stderr)
            self.tensorflow = self.load()
        return self.tensorflow(messages, max_new_tokens)

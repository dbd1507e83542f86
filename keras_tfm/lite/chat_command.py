"""`keras-tfm chat "..."` from a cached LiteRT entry, before TensorFlow loads.

`keras_tfm.launcher` calls `answer_from_cache(argv)` first for a `chat`
command; it answers only when the command asks for nothing the entry cannot
give (a single message, greedy decoding, the float32 weights, a buffer long
enough), and otherwise returns False without printing anything, and the
command runs through TensorFlow (`keras_tfm.cli`), which writes the entry
for next time (`keras_tfm.chat.entry_writer`).

The options are parsed here with a parser of their own because
`keras_tfm.cli` builds its parser from the commands' modules, which import
Keras and TensorFlow; the defaults are shared (`DEFAULT_MODEL`,
`DEFAULT_MAX_NEW_TOKENS`).

Example:
>>> answer_from_cache(["chat", "--sampler", "top_p", "Hi"])  # sampling: no
False
"""

import argparse

DEFAULT_MODEL = "smollm2_135m_instruct"
DEFAULT_MAX_NEW_TOKENS = 256


class _QuietParser(argparse.ArgumentParser):
    """Raises instead of printing a usage error: `keras_tfm.cli` reports it."""

    def error(self, message):
        raise ValueError(message)


def _parser():
    parser = _QuietParser(add_help=False, exit_on_error=False)
    parser.add_argument("message")
    parser.add_argument("--model", "--preset", default=DEFAULT_MODEL)
    parser.add_argument("--max-new-tokens", type=int, default=DEFAULT_MAX_NEW_TOKENS)
    parser.add_argument("--sampler", choices=["greedy"])
    parser.add_argument("--weights", default="float32", choices=["float32"])
    parser.add_argument("--stop", action="append")
    parser.add_argument("--verbose", action="store_true")
    return parser


def _parse(args):
    """The chat options, or None for a command the cache cannot answer."""
    try:
        options, unknown = _parser().parse_known_args(args)
    except (argparse.ArgumentError, ValueError):
        return None
    if unknown or options.max_new_tokens <= 0 or "-h" in args or "--help" in args:
        return None
    return options


def answer_from_cache(argv, root=None):
    """Prints the answer of `keras-tfm chat ...` from the cache; whether it did.

    `argv`: the command's arguments (`["chat", message, options...]`).
    `root`: the cache folder (default `user_cache.cache_directory()`).
    """
    if argv[:1] != ["chat"]:
        return False
    options = _parse(argv[1:])
    if options is None:
        return False
    from keras_tfm.lite.chat_entries import find_entry

    found = find_entry(options.model, options.weights, root)
    if found is None:
        return False
    folder, entry = found
    greedy = entry["greedy_is_plain" if options.sampler else "default_is_greedy"]
    if not greedy:
        return False
    try:
        from keras_tfm.lite.litert_chat import LiteRTChat

        chat = LiteRTChat(folder, entry)
    except (ImportError, ValueError, RuntimeError):  # e.g. litert uninstalled
        return False
    if not chat.fits(chat.prompt_ids(options.message), options.max_new_tokens):
        return False
    pieces = chat.chat(
        options.message,
        max_new_tokens=options.max_new_tokens,
        stop_strings=options.stop or (),
        stream=True,
    )
    for piece in pieces:
        print(piece, end="", flush=True)
    print()
    return True

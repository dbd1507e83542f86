"""`keras-tfm chat ["MESSAGE"]`: ask an instruct model one message or, without
a message, converse. A preset that keeps a template of its LiteRT step
writes its LiteRT entry first and answers from it; any other model answers
through TensorFlow, then starts its entry's writer for the next time."""

import argparse
import contextlib
import functools
import sys

from keras_tfm.cli import budget, loading
from keras_tfm.cli.arguments import MODEL_HELP, positive_int
from keras_tfm.cli.decoding import add_decoding_options, check_settings
from keras_tfm.lite import chat_command
from keras_tfm.lite.chat_entries import default_weights, keeps_template
from keras_tfm.lite.decoding_flags import sampler_settings

HELP = "ask an instruct model (SmolLM2 by default)"

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

BACKGROUND_LINE = (
    "keras-tfm: writing {model}'s LiteRT copy in a background process (for "
    "SmolLM2-135M about a minute and 5 GB of memory); the next chat "
    "answers from it without TensorFlow (`keras-tfm cache info`)."
)
"""What the command says once it starts the background writer."""

PROMPT_THROUGH_STEP = 64
"""The command streams prompts of at most this many tokens through the
compiled decoding step (`CausalLM.prompt_through_step`): a process that
answers once traces and compiles (or loads) that one small program instead
of `generate`'s whole loop."""


def add_arguments(p):
    p.add_argument(
        "message",
        nargs="?",
        help="the user's message (none: an interactive conversation, Ctrl-D ends it)",
    )
    p.add_argument(
        "--model",
        "--preset",
        default=DEFAULT_MODEL,
        help=MODEL_HELP + " (default: %(default)s)",
    )
    p.add_argument(
        "--max-new-tokens",
        type=positive_int,
        help=f"default: {DEFAULT_MAX_NEW_TOKENS}, or the positions "
        "the model has left after the prompt where fewer (learned positions)",
    )
    p.add_argument(
        "--sampler",
        choices=["greedy", "top_p"],
        help="default: the preset's settings (greedy unless its "
        "generation_config.json says otherwise)",
    )
    add_decoding_options(
        p,
        temperature=DEFAULT_TEMPERATURE,
        weights={"default": None, "help": WEIGHTS_HELP},
    )


def answer_from_cache(args, root=None, continue_with=None):
    """Prints the answer of a parsed `keras-tfm chat` from the model's cached
    LiteRT entry, before Keras is imported; whether it did (False: nothing
    was printed, and TensorFlow answers).

    `args`: the command's arguments, parsed by `keras_tfm.cli.build_parser`
    (any other command is not answered). `root`: the cache folder (default
    `user_cache.cache_directory()`). `continue_with`: `() -> stream(messages,
    max_new_tokens)`, the TensorFlow session a conversation moves to once it
    outgrows the entry's buffer.
    """
    if getattr(args, "command", None) != "chat":
        return False
    return chat_command.answer_from_entry(cache_options(args), root, continue_with)


def cache_options(args):
    """A copy of `keras-tfm chat`'s `args` as the LiteRT entry reads them: the
    model's default weights and `DEFAULT_MAX_NEW_TOKENS` where not given."""
    options = argparse.Namespace(**vars(args))
    options.weights = args.weights or default_weights(args.model)
    options.max_new_tokens = args.max_new_tokens or DEFAULT_MAX_NEW_TOKENS
    return options


def chat_model(args, store=True):
    """The model the options name, ready to chat, and its decoding settings.

    Without `--weights`, `args.weights` becomes the LiteRT entry's default
    (`chat_entries.default_weights`) and TensorFlow, where it answers, keeps
    the float32 weights; `args.tensorflow_weights` says which it stores.
    `store`: with the weights stored so (False: as loaded, float32, what a
    LiteRT entry is written from; `store_tensorflow_weights` later).
    """
    args.tensorflow_weights = args.weights or "float32"
    args.weights = args.weights or default_weights(args.model)
    model = loading.language_model(args.model, needs="chat", weights=args.weights)
    if store:
        model = store_tensorflow_weights(model, args)
    args.max_new_tokens = answer_length(model, args)
    settings = sampler_settings(args.sampler, args)
    check_settings(model, settings)  # as `chat` would: a flag not read is refused
    if getattr(model, "is_decoder_only", False):
        model.prompt_through_step = PROMPT_THROUGH_STEP
    return model, settings


def answer_length(model, args):
    """`--max-new-tokens` fitted to what the prompt leaves of the model's
    positions (`budget.fit_to_model`): the message's, or in a
    conversation an empty first message's (the longest any answer can be)."""
    from keras_tfm.chat.conversation import prompt_ids

    default = DEFAULT_MAX_NEW_TOKENS
    if not hasattr(model, "new_token_room"):  # a model with no limit to say
        return args.max_new_tokens or default
    prompt = prompt_ids(model.tokenizer, args.message or "")
    return budget.fit_to_model(model, prompt, args.max_new_tokens, default)


def run(args):
    from keras_tfm.chat.entry_writer import start_chat_entry, write_chat_entry
    from keras_tfm.convert.converted_cache import without_new_entries

    # A preset with a step template answers from its LiteRT entry from now
    # on: its converted float32 weights are not kept beside it.
    kept = contextlib.nullcontext()
    if keeps_template(args.model):
        kept = without_new_entries()
    with kept:
        model, settings = chat_model(args, store=False)
    # A preset that keeps a template of its LiteRT step has its entry written
    # now, in seconds, and answers from it, as the next command will.
    if write_chat_entry(model, args.model, args.weights, settings, announce=_say):
        later = functools.partial(_tensorflow_stream, model, settings, args)
        if chat_command.answer_from_entry(args, continue_with=later):
            return
    model = store_tensorflow_weights(model, args)
    if args.message is None:  # an interactive conversation
        from keras_tfm.chat import converse

        converse(model, max_new_tokens=args.max_new_tokens, **settings)
        return
    # Streamed, stop strings included (checked on the host, never shown).
    pieces = model.chat(
        args.message, max_new_tokens=args.max_new_tokens, stream=True, **settings
    )
    for piece in pieces:
        print(piece, end="", flush=True)
    print()
    # The next `chat` with this model answers from LiteRT, without TensorFlow.
    if start_chat_entry(model, args.model, args.weights, settings) is not None:
        print(BACKGROUND_LINE.format(model=args.model), file=sys.stderr)


def _say(line):
    """One line on stderr, before a wait the user would otherwise not see."""
    print(f"keras-tfm: {line}", file=sys.stderr, flush=True)


def store_tensorflow_weights(model, args):
    """`model` with its weights stored as TensorFlow answers with them."""
    return loading.store_weights(model, args.tensorflow_weights)


def _tensorflow_stream(model, settings, args):
    """`stream(messages, max_new_tokens)` of a TensorFlow `ChatSession` on
    `model`: where a conversation on a LiteRT copy goes on once it outgrows
    the copy's buffer (`keras_tfm.lite.chat_command`); the oldest turns are
    dropped only where the model's own context ends, as `converse` drops
    them."""
    from keras_tfm.chat import ChatSession
    from keras_tfm.chat.repl import history_fit

    session = ChatSession(model)
    fit = history_fit(model, args.max_new_tokens)

    def stream(messages, max_new_tokens):
        return session.stream(fit(messages), max_new_tokens, **settings)

    return stream


def continue_conversation(argv):
    """`_tensorflow_stream` for the command `argv` (`["chat", options...]`),
    the model loaded: what the launcher hands a conversation on a LiteRT
    copy."""
    from keras_tfm.cli import build_parser

    args = build_parser().parse_args(argv)
    model, settings = chat_model(args)
    return _tensorflow_stream(model, settings, args)

"""`keras-tfm chat "..."` from a cached LiteRT entry, before TensorFlow loads.

`keras_tfm.launcher` parses the command with `keras_tfm.cli`'s parser
(which imports no Keras) and, for a `chat`, calls `answer_from_entry`
first; it answers only when the command asks for nothing the entry cannot
give (its int8 or float32 step, greedy decoding or sampling without logit
processors, a buffer long enough), and otherwise returns False without
printing anything, and the command runs through TensorFlow
(`keras_tfm.cli.chat`), which writes the entry for next time
(`keras_tfm.chat.entry_writer`). Without a message, the conversation
(`keras_tfm.lite.repl`) runs on the entry, each turn running only what its
cache does not hold; once the conversation outgrows the entry's buffer, it
goes on through TensorFlow (`continue_with`, given by the launcher), whose
context is the model's own.

The settings are resolved against the model's own (`entry.json`) by the
engine's rules (`keras_tfm.generation.generation_config`), which import no
Keras: a setting TensorFlow would refuse is left to TensorFlow to refuse.

Example:
>>> import argparse
>>> flags = argparse.Namespace(sampler=None, temperature=None, top_p=None,
...     seed=None, repetition_penalty=1.2, min_p=None, stop=None)
>>> entry = {"generation_config": None}
>>> decoding_config(flags, entry) is None  # a logit processor: TensorFlow's
True
"""

import sys

from keras_tfm.lite.decoding_flags import sampler_settings


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


def answer_from_entry(options, root=None, continue_with=None):
    """Prints the answer of the chat command `options` (its parsed flags)
    from the model's entry; whether it did.

    `options`: `keras-tfm chat`'s parsed arguments, with `weights` and
    `max_new_tokens` resolved (`keras_tfm.cli.chat.cache_options`).
    `root`: the cache folder (default `user_cache.cache_directory()`).
    `continue_with`: `() -> stream(messages, max_new_tokens)`, the
    TensorFlow session that takes over a conversation that no longer fits
    the entry's buffer.
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

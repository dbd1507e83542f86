"""A conversation that keeps its key/value cache between turns.

`chat(model, messages)` formats the whole conversation with the chat
template and prefills all of it at every turn. A `ChatSession` keeps the
cache of the tokens it has already run (the last prompt and its answer) and
compares each new prompt's tokens with them: the longest common token
prefix is kept, only the rest is run. A conversation that grows by one
message per turn runs only that message (and the template's markup around
it); an edited or shortened history keeps the prefix up to the first
changed token and runs the rest again.

A turn is decoded by the streamed strategy's host loop
(`keras_tfm.generation.strategies.streamed.stream_tokens`) on the engine's
compiled step (`loops.stream_step`: the model's `decode_step`, then the
logit processors and the sampler, every setting a tensor), starting where
the kept cache ends, so that the answer streams; a new stretch of prompt
longer than `model.prompt_through_step` tokens goes through a compiled
chunked prefill (`DecoderSteps.extend`) instead of the step.
"""

import dataclasses

import keras
import numpy as np
from keras import ops

from keras_tfm.chat.conversation import (
    chat_stop_ids,
    check_chat_model,
    detokenize_answer,
    prompt_ids,
)
from keras_tfm.generation import backend, buffers, loops
from keras_tfm.generation.decoder_steps import DecoderSteps
from keras_tfm.generation.generation_config import (
    GenerationConfig,
    settings_tensors,
    single_config,
)
from keras_tfm.generation.strategies.streamed import stream_tokens
from keras_tfm.kernels import kv_cache
from keras_tfm.lite.stop_text import text_pieces
from keras_tfm.validation import check_positive_int

CACHE_BUCKET = 256
"""The cache grows in steps of this many positions (one compile per size).
Doubling instead (fewer compiles) measured a warm turn 1.5x slower: every
pass attends over the whole buffer, 2,048 positions for a 1,049-token
conversation instead of 1,280 (docs/benchmarks/decoding.md)."""


SETTINGS = {
    field.name
    for field in dataclasses.fields(GenerationConfig)
    if field.name not in ("sampler", "num_beams", "length_penalty")
}
"""What `stream` and `chat` take besides `sampler` and `stop_token_ids`."""


def common_prefix_length(a, b):
    """How many leading items `a` and `b` share.

    Example:
    >>> common_prefix_length([1, 2, 3, 4], [1, 2, 5])
    2
    """
    n = min(len(a), len(b))
    a, b = np.asarray(a[:n]), np.asarray(b[:n])
    differ = np.flatnonzero(a != b)
    return int(differ[0]) if differ.size else n


class ChatSession:
    """A chat with `model` whose key/value cache outlives each turn.

    `session.chat(messages)` answers a conversation exactly as
    `keras_tfm.chat.chat(model, messages)` (`model.chat`) does, greedy by
    default (the same template, stop ids, stop strings and settings), but
    runs only the tokens that follow the longest common prefix of the new
    prompt and the tokens already cached (the previous prompt and its
    answer); `session.stream(messages)` yields the answer's text as it
    comes. Pass the whole conversation each turn: it may grow, or be
    edited anywhere (then the cache is kept up to the first changed token).
    `session.send(message)` keeps the conversation in `session.messages`.

    The cache lives as long as the session (the memory of a `generate`
    buffer of the conversation's length); `reset()` frees it. A
    conversation plus `max_new_tokens` must fit in `max_sequence_length`
    (the session does not slide the window; `model.chat` does).

    Args:
        model: a decoder-only `keras_tfm.models.CausalLM` whose tokenizer
            has a chat template (e.g. the preset "smollm2_135m_instruct").
        jit_compile: compile the step and the prefill with XLA (default;
            False traces plain `tf.function`s, quicker for tiny models).

    Attributes:
        reused_length: of the last turn's prompt, the tokens the cache held.
        prefilled_length: of the last turn's prompt, the tokens run.

    Example:
    >>> llm = keras_tfm.models.CausalLM.from_preset(  # doctest: +SKIP
    ...     "smollm2_135m_instruct")
    >>> session = keras_tfm.chat.ChatSession(llm)  # doctest: +SKIP
    >>> session.send("My name is Ada.", max_new_tokens=32)  # doctest: +SKIP
    'Nice to meet you, Ada! ...'
    >>> session.send("What is my name?")  # doctest: +SKIP
    'Your name is Ada.'
    >>> session.reused_length, session.prefilled_length  # doctest: +SKIP
    (61, 14)
    """

    def __init__(self, model, jit_compile=True):
        check_chat_model(model, "A `ChatSession`")
        self.model = model
        self.steps = DecoderSteps(model)
        self.jit_compile = bool(jit_compile)
        self._warm = set()  # cache lengths whose chunked prefill is compiled
        self.reset()

    def reset(self):
        """Forgets the cache (and `messages`): the next turn runs all."""
        self.messages = []
        self._caches = None
        self._ids = []  # the tokens of the last prompt and answer
        self.cached_length = 0  # leading `_ids` whose keys are in the cache
        self.reused_length = 0
        self.prefilled_length = 0

    def send(self, message, max_new_tokens=256, **settings):
        """Adds a user `message` to `messages`, answers, and adds the answer."""
        self.messages.append({"role": "user", "content": message})
        try:
            answer = self.chat(self.messages, max_new_tokens, **settings)
        except Exception:
            self.messages.pop()
            raise
        self.messages.append({"role": "assistant", "content": answer})
        return answer

    def chat(self, messages, max_new_tokens=256, **settings):
        """The answer to `messages`, as `model.chat` gives it, from the cache.

        Args:
            messages: a string (one user message) or the whole conversation,
                a list of {"role": "system" | "user" | "assistant",
                "content": str}.
            max_new_tokens: the longest answer, in tokens.
            **settings: as in `generate`, for the built-in samplers (no
                beam search, sampler object or scores): sampler,
                temperature, top_k, top_p, min_p, the penalties, seed,
                stop_token_ids, stop_strings.

        Returns:
            The answer, without the template's markup.
        """
        return "".join(self.stream(messages, max_new_tokens, **settings)).strip()

    def stream(self, messages, max_new_tokens=256, **settings):
        """`chat`'s answer as a generator of its text pieces (checked now,
        decoded as it is read; the cache is kept up to where reading stops)."""
        model = self.model
        tokenizer = model.tokenizer
        check_positive_int("max_new_tokens", max_new_tokens)
        stops = chat_stop_ids(tokenizer, settings.pop("stop_token_ids", None))
        sampler = settings.pop("sampler", None)
        unknown = sorted(set(settings) - SETTINGS)
        if unknown:
            raise ValueError(
                "A `ChatSession` takes the settings of the built-in samplers "
                f"({', '.join(sorted(SETTINGS))}). Received: "
                + ", ".join(f"{name}={settings[name]!r}" for name in unknown)
            )
        if not isinstance(sampler, str | None) or sampler == "beam":
            raise ValueError(
                "A `ChatSession` decodes with the built-in samplers "
                "('greedy', 'random', 'top_k', 'top_p'). Received: "
                f"sampler={sampler!r}"
            )
        config = single_config(model.generation_config, sampler, settings)
        if config.sampler == "beam":
            raise ValueError(
                "A `ChatSession` does not run beam search. Received: "
                f"num_beams={config.num_beams}"
            )
        prompt = prompt_ids(tokenizer, messages)
        limit = model.backbone.max_sequence_length
        if len(prompt) + max_new_tokens > limit:
            raise ValueError(
                f"The conversation ({len(prompt)} tokens) plus max_new_tokens="
                f"{max_new_tokens} does not fit in max_sequence_length={limit}; "
                "a session does not slide its window. Shorten the history or "
                f"use `model.chat`. Received: {len(messages)} messages"
            )
        tensors = settings_tensors([config], stops)
        tokens = self._turn(prompt, max_new_tokens, tensors)
        return text_pieces(
            detokenize_answer(tokenizer), tokens, config.stop_strings, stops
        )

    def _turn(self, prompt, max_new_tokens, settings):
        """Runs the prompt past the cached prefix, then decodes on the
        streamed strategy's loop (`stream_tokens`) from where the cache
        ends; yields each new token once the session has recorded it."""
        reused = common_prefix_length(self._ids[: self.cached_length], prompt)
        reused = min(reused, len(prompt) - 1)  # the last token gives the logits
        self.reused_length = reused
        self.prefilled_length = len(prompt) - reused
        caches = self._cache_for(len(prompt) + max_new_tokens)
        length = ops.shape(kv_cache.values_of(caches[0]))[2]
        step = self._compiled("step", loops.stream_step(self.model, None))
        self._ids, self.cached_length = list(prompt), reused
        first = reused + 1  # the step at `index` writes the keys of `index - 1`
        through_step = len(prompt) - 1 - reused <= self.model.prompt_through_step
        extends = first < len(prompt) and (length in self._warm or not through_step)

        def prefill(tokens, start):
            if extends:
                extend = self._compiled("extend", self.steps.extend)
                self._caches = extend(
                    tokens, caches, np.int32(reused), np.int32(start - 1)
                )
                self._warm.add(length)
            else:
                self._caches = caches
            self.cached_length = start - 1
            return self._caches

        def recorded_step(tokens, caches, index, mask):
            token, self._caches = step((), tokens, caches, index, mask, settings)
            self.cached_length = int(index)
            return ops.convert_to_numpy(token), self._caches

        steps = stream_tokens(
            prefill, recorded_step, [prompt], max_new_tokens, length,
            window_shift=None, fill_id=self.model.fill_id,
            stop_token_ids=None, start=len(prompt) if extends else first,
        )  # fmt: skip
        for (token,) in steps:
            self._ids.append(token)
            yield token

    def warm(self):
        """Compiles the chunked prefill for the cache's current length (what
        a REPL runs while the user types): the next turns then run their new
        tokens in one pass instead of one step per token."""
        if self._caches is None:
            return
        length = int(ops.shape(kv_cache.values_of(self._caches[0]))[2])
        if length in self._warm:
            return
        extend = self._compiled("extend", self.steps.extend)
        tokens = np.full((1, length), self.model.fill_id, "int32")
        extend(tokens, self._caches, np.int32(0), np.int32(0))  # writes nothing
        self._warm.add(length)

    def _compiled(self, name, function):
        """`function` compiled once per model (sessions share it)."""
        return self.model.compiled_loops.get(
            ("chat session", name, self.jit_compile),
            lambda: backend.compile_loop(function, (self.model,), self.jit_compile),
        )

    def _cache_for(self, needed):
        """The session's caches, grown (zero-padded) to hold `needed` tokens."""
        length = min(
            buffers.rounded_length(needed, multiple=CACHE_BUCKET),
            self.model.backbone.max_sequence_length,
        )
        if self._caches is None:
            self._caches = self.steps.empty_cache(1, length)
        current = ops.shape(kv_cache.values_of(self._caches[0]))[2]
        if current < needed:
            pad = [(0, 0), (0, 0), (0, length - current), (0, 0), (0, 0)]
            self._caches = keras.tree.map_structure(
                lambda tensor: ops.pad(tensor, pad), self._caches
            )
        return self._caches

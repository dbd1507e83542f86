"""A conversation that keeps its key/value cache between turns.

`CausalLM.chat(messages)` formats the whole conversation with the chat
template and prefills all of it at every turn. A `ChatSession` keeps the
cache of the tokens it has already run (the last prompt and its answer) and
compares each new prompt's tokens with them: the longest common token
prefix is kept, only the rest is prefilled. A conversation that grows by one
message per turn prefills only that message (and the template's markup
around it); an edited or shortened history keeps the prefix up to the first
changed token and re-prefills from there.
"""

import keras
import numpy as np
from keras import ops

from keras_tfm._optional import tensorflow as tf
from keras_tfm.generation import generation_utils as gen
from keras_tfm.generation.decoder_steps import DecoderSteps
from keras_tfm.kernels import kv_cache
from keras_tfm.validation import check_positive_int

CACHE_BUCKET = 256
"""The cache grows in steps of this many positions (one compile per size).
Doubling instead (fewer compiles) measured a warm turn 1.5x slower: every
pass attends over the whole buffer, 2,048 positions for a 1,049-token
conversation instead of 1,280 (docs/benchmarks.md)."""


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
    `model.chat(messages)` does (the same template, stop token and sampler;
    greedy by default), but prefills only the tokens that follow the longest
    common prefix of the new prompt and the tokens already cached (the
    previous prompt and its answer). Pass the whole conversation each turn,
    as to `model.chat`: it may grow, or be edited anywhere (then the cache is
    kept up to the first changed token). `session.send(message)` keeps the
    conversation in `session.messages` for you.

    The cache lives as long as the session (its memory is that of a
    `generate` buffer of the conversation's length); `reset()` frees it. A
    conversation plus `max_new_tokens` must fit in `max_sequence_length`
    (the session does not slide the window; `model.chat` does).

    Args:
        model: a `keras_tfm.models.CausalLM` whose tokenizer has a chat
            template (e.g. the preset "smollm2_135m_instruct").
        jit_compile: compile each turn's loop with XLA (default; False
            traces a plain `tf.function`, quicker to build for tiny models).

    Example:
    >>> llm = keras_tfm.models.CausalLM.from_preset(  # doctest: +SKIP
    ...     "smollm2_135m_instruct")
    >>> session = keras_tfm.generation.ChatSession(llm)  # doctest: +SKIP
    >>> session.send("My name is Ada.", max_new_tokens=32)  # doctest: +SKIP
    'Nice to meet you, Ada! ...'
    >>> session.send("What is my name?")  # doctest: +SKIP
    'Your name is Ada.'
    >>> session.reused_length, session.prefilled_length  # doctest: +SKIP
    (61, 14)
    """

    def __init__(self, model, jit_compile=True):
        tokenizer = getattr(model, "tokenizer", None)
        if not callable(getattr(tokenizer, "apply_chat_template", None)):
            raise ValueError(
                "A `ChatSession` needs a model whose tokenizer has a chat "
                "template (e.g. the preset smollm2_135m_instruct). Received: "
                f"a model with tokenizer={type(tokenizer).__name__}"
            )
        self.model = model
        self.steps = DecoderSteps(model)
        self.jit_compile = bool(jit_compile)
        self.messages = []
        self.reset()

    def reset(self):
        """Forgets the cache (and `messages`): the next turn prefills all."""
        self.messages = []
        self._caches = None
        self._ids = []  # the tokens of the last prompt and answer
        self.cached_length = 0  # leading `_ids` whose keys are in the cache
        self.reused_length = 0  # of the last turn's prompt, from the cache
        self.prefilled_length = 0  # of the last turn's prompt, computed

    def send(self, message, max_new_tokens=256, **sampler_settings):
        """Adds a user `message` to `messages`, answers, and adds the answer."""
        self.messages.append({"role": "user", "content": message})
        try:
            answer = self.chat(self.messages, max_new_tokens, **sampler_settings)
        except Exception:
            self.messages.pop()
            raise
        self.messages.append({"role": "assistant", "content": answer})
        return answer

    def chat(
        self,
        messages,
        max_new_tokens=256,
        sampler="greedy",
        temperature=None,
        top_k=None,
        top_p=None,
        seed=None,
    ):
        """The answer to `messages`, as `model.chat` gives it, from the cache.

        Args:
            messages: a string (one user message) or the whole conversation,
                a list of {"role": "system" | "user" | "assistant",
                "content": str}.
            max_new_tokens: the longest answer, in tokens.
            sampler, temperature, top_k, top_p, seed: as in `generate`
                (no beam search).

        Returns:
            The answer, without the template's markup.
        """
        model, tokenizer = self.model, self.model.tokenizer
        check_positive_int("max_new_tokens", max_new_tokens)
        prompt = [int(i) for i in tokenizer(tokenizer.apply_chat_template(messages))]
        limit = model.backbone.max_sequence_length
        if len(prompt) + max_new_tokens > limit:
            raise ValueError(
                f"The conversation ({len(prompt)} tokens) plus max_new_tokens="
                f"{max_new_tokens} does not fit in max_sequence_length={limit}; "
                "a session does not slide its window. Shorten the history or "
                f"use `model.chat`. Received: {len(messages)} messages"
            )
        sampler, key = gen.make_sampler(
            sampler, temperature, top_k, top_p, None, None, model.fill_id, seed
        )
        if key[0] == "beam":
            raise ValueError(
                "A `ChatSession` does not run beam search. Received: "
                f"sampler={key[0]!r}"
            )
        end_id = tokenizer.end_token_id
        function, sampler = model.compiled_loops.get(
            ("chat_session", key, end_id, self.jit_compile),
            lambda: (
                # No autograph: the loop is ops.while_loop already, and
                # autograph's conversion cache mixed up methods across tests.
                tf.function(
                    self._turn_function(sampler, end_id),
                    jit_compile=self.jit_compile,
                    autograph=False,
                ),
                sampler,
            ),
        )
        gen.reset_seed(sampler, seed)

        reused = common_prefix_length(self._ids[: self.cached_length], prompt)
        reused = min(reused, len(prompt) - 1)  # the last token gives the logits
        caches = self._cache_for(len(prompt) + max_new_tokens)
        length = ops.shape(kv_cache.values_of(caches[0]))[2]
        tokens = np.full((1, length), model.fill_id, "int32")
        tokens[0, : len(prompt)] = prompt
        tokens, caches, index = function(
            tokens,
            caches,
            np.int32(reused),
            np.int32(len(prompt)),
            np.int32(len(prompt) + max_new_tokens),
        )
        index = int(index)
        self._caches = caches
        self._ids = [int(i) for i in ops.convert_to_numpy(tokens)[0, :index]]
        self.cached_length = index - 1  # the last token's keys are not written
        self.reused_length = reused
        self.prefilled_length = len(prompt) - reused
        answer = self._ids[len(prompt) :]
        if end_id in answer:
            answer = answer[: answer.index(end_id)]
        return tokenizer.detokenize(answer).strip()

    def _cache_for(self, needed):
        """The session's caches, grown (zero-padded) to hold `needed` tokens."""
        length = min(
            gen.bucket_length(needed, CACHE_BUCKET),
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

    def _turn_function(self, sampler, end_id):
        """`(tokens, caches, index) = turn(tokens, caches, reused, prompt_length, end)`.

        Fills the cache from `reused` to the prompt's last token, then
        samples from `prompt_length` until the end id or `end`; `index` is
        the position after the last sampled token.
        """
        steps = self.steps

        def turn(tokens, caches, reused, prompt_length, end):
            caches = steps.extend(tokens, caches, reused, prompt_length - 1)

            def body(tokens, caches, index, done):
                token = gen.previous_token(tokens, index)
                logits, caches = steps(
                    token, caches, index - 1, steps.padding_mask_of(tokens)
                )
                probabilities = sampler.compute_probabilities(logits[:, 0, :])
                new = ops.cast(sampler.get_next_token(probabilities), tokens.dtype)
                tokens = ops.slice_update(tokens, [0, index], new[:, None])
                return tokens, caches, index + 1, ops.all(ops.equal(new, end_id))

            tokens, caches, index, _ = ops.while_loop(
                lambda tokens, caches, index, done: ops.logical_and(
                    ops.logical_not(done), index < end
                ),
                body,
                (tokens, caches, prompt_length, ops.convert_to_tensor(False)),
            )
            return tokens, caches, index

        return turn

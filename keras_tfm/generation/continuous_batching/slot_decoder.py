"""The model side of continuous batching: a cache of fixed slots, two
compiled functions over it.

`SlotDecoder` owns one key/value cache per decoder block with `num_slots`
rows of `max_length` positions. A request is prefilled alone (batch 1) and
its keys and values are copied into its slot's rows; then one compiled call
decodes `steps_per_call` tokens for every slot at once, each slot at its own
position (a (batch,) `cache_update_index`: the per-row writes and masks of
`MultiHeadSelfAttention`), so a row never sees another row's keys, and a
slot's stale positions (an earlier request's) are never attended to.

The caches live in `keras.Variable`s that the compiled calls read and
assign: on TensorFlow XLA then updates them in place (a resource
variable's new value aliases its input buffer), where a cache passed in
and returned was copied whole at every call (TensorFlow does not donate
input tensors): ~190 MB for SmolLM2
at 8 slots of 512 positions, as much as the attention reads in a step. So
a call may decode a single step, and requests join at every step.

Beside the caches, a (num_slots, vocabulary_size) count of each slot's
generated tokens serves OpenAI's presence and frequency penalties
(`logit_processors.presence_frequency_penalty`), and every token comes
with its log-probability under the model (the log-softmax of the raw
logits, before penalties and temperature: vLLM's default), and with the
`top_logprobs` most likely tokens of that same distribution (OpenAI's
`top_logprobs`): a fixed number per call, the compiled program's shape,
of which each request keeps the ones it asked for.

Every call also takes which tokens each row may choose (`allowed`, bool
(rows, V); None: all): structured output's automaton state, moved on by
the host between calls (`Scheduler`), as llama.cpp's grammars and vLLM's
xgrammar masks are. The same mask holds for each of a call's steps.

With a prefix cache (`prefix_cache_bytes`), the keys and values of the
prompts' whole blocks of `block_size` tokens are also kept in a pool of
blocks beside the slots, indexed on the host by `PrefixCache`: a prompt
that starts with blocks the pool holds copies them into its slot's rows
and prefills only the tokens after them, from that position (the cached
keys and values are those of the same tokens at the same positions, so
rotary and learned positions agree). When a request ends, `keep` adds the
whole blocks of its prompt and answer, which its slot holds: the next turn
of a conversation (the same prompt, the answer, a new question) reuses them.
"""

import keras
import numpy as np
from keras import ops

from keras_tfm.generation import backend
from keras_tfm.generation.continuous_batching.prefix_cache import PrefixCache
from keras_tfm.generation.continuous_batching.slot_sampler import (
    row_seed,
    sample_tokens,
)
from keras_tfm.generation.decode_loop import chosen_log_probabilities
from keras_tfm.generation.logit_processors import presence_frequency_penalty
from keras_tfm.kernels.kv_cache import cache_bytes
from keras_tfm.validation import check_positive_int

PREFIX_BLOCK_SIZE = 16
"""Tokens per block of the prefix cache (vLLM's default block size): a
prompt reuses the whole blocks it shares with an earlier one, so a shared
500-token system prompt reuses 496 tokens or more."""

POOL_SLOTS = 4
"""The prefix cache's pool never holds more blocks than this many times
the slots' positions (a bound in bytes far above what a small model's
prompts fill allocates no more than it can use)."""


class SlotDecoder:
    """Prefill-into-a-slot and multi-slot decoding of a causal LM.

    Args:
        model: a `keras_tfm.models.CausalLM` (decoder-only).
        num_slots: how many requests decode together.
        max_length: positions per slot (prompt plus answer), at most the
            model's `max_sequence_length`.
        steps_per_call: tokens decoded per slot in one compiled call.
        top_logprobs: how many of the most likely tokens (and their
            log-probabilities) every step returns beside the chosen one
            (0: none); at most the vocabulary size.
        prefix_cache_bytes: the most bytes of the prefix cache's pool of
            prompt blocks (0: no prefix cache); see `prefix_cache`.
        block_size: tokens per block of the prefix cache.

    Example:
    >>> from keras_tfm.generation.continuous_batching import SlotDecoder
    >>> backbone = keras_tfm.models.DecoderBackbone(
    ...     vocabulary_size=50, num_layers=1, num_heads=2, hidden_dim=16,
    ...     intermediate_dim=32, max_sequence_length=32)
    >>> model = keras_tfm.models.CausalLM(backbone)
    >>> decoder = SlotDecoder(model, 2, 32, 2, top_logprobs=3)
    >>> first, logprob, (top_ids, top_values), cached = decoder.prefill(1, [5, 6, 7])
    >>> tokens, logprobs, (top_ids, top_values) = decoder.decode([0, first], [0, 3])
    >>> tokens.shape, logprobs.dtype, bool(logprob < 0), top_ids.shape, cached
    ((2, 2), dtype('float32'), True, (2, 2, 3), 0)
    """

    def __init__(
        self, model, num_slots, max_length, steps_per_call=1, top_logprobs=0,
        prefix_cache_bytes=0, block_size=PREFIX_BLOCK_SIZE,
    ):  # fmt: skip
        self.model = model
        self.num_slots = check_positive_int("num_slots", num_slots)
        self.max_length = check_positive_int("max_length", max_length)
        self.steps_per_call = check_positive_int("steps_per_call", steps_per_call)
        vocabulary_size = model.backbone.vocabulary_size
        if (
            isinstance(top_logprobs, bool)
            or not isinstance(top_logprobs, int)
            or not 0 <= top_logprobs <= vocabulary_size
        ):
            raise ValueError(
                f"`top_logprobs` must be an integer from 0 to the vocabulary "
                f"size ({vocabulary_size}). Received: top_logprobs={top_logprobs!r}"
            )
        self.top_logprobs = top_logprobs
        limit = model.backbone.max_sequence_length
        if max_length > limit:
            raise ValueError(
                "`max_length` must be at most the model's max_sequence_length "
                f"({limit}). Received: max_length={max_length}"
            )
        self.caches = keras.tree.map_structure(
            lambda c: keras.Variable(c, trainable=False),
            model.backbone.empty_cache(num_slots, max_length),
        )
        # Per slot, how often each token was generated (the penalties').
        self.counts = keras.Variable(
            ops.zeros((num_slots, vocabulary_size)), trainable=False
        )
        self.prefix_cache, self.pools = None, []
        if prefix_cache_bytes:
            self._make_pool(prefix_cache_bytes, block_size)
        owners = (model, self)
        self._prefill = backend.compile_loop(self._prefill_function, owners)
        self._prefill_after = backend.compile_loop(
            self._prefill_after_function, owners
        )
        self._decode = backend.compile_loop(self._decode_function, owners)
        self._keep = backend.compile_loop(self._keep_function, owners)
        self._extend = backend.compile_loop(self._extend_function, owners)

    def _make_pool(self, prefix_cache_bytes, block_size):
        """The pool: per cache tensor (num_slots, 2, max_length, ...), one
        of (2 * (num_blocks + 1), block_size, ...), each block's keys then
        (num_blocks + 1 on) its values; block num_blocks takes the writes of
        blocks not kept."""
        if (
            isinstance(prefix_cache_bytes, bool)
            or not isinstance(prefix_cache_bytes, int)
            or prefix_cache_bytes < 0
        ):
            raise ValueError(
                "`prefix_cache_bytes` must be a non-negative integer. Received: "
                f"prefix_cache_bytes={prefix_cache_bytes!r}"
            )
        check_positive_int("block_size", block_size)
        block_bytes = cache_bytes(self.model.backbone.empty_cache(1, block_size))
        if prefix_cache_bytes < block_bytes:
            raise ValueError(
                f"`prefix_cache_bytes` must hold at least one block of {block_size} "
                f"tokens ({block_bytes} bytes for this model), or be 0 (no "
                f"prefix cache). Received: prefix_cache_bytes={prefix_cache_bytes}"
            )
        self.block_size = block_size
        self._row_blocks = -(-self.max_length // block_size)  # blocks per slot
        num_blocks = min(
            prefix_cache_bytes // block_bytes,
            POOL_SLOTS * self.num_slots * self._row_blocks,
        )
        self.prefix_cache = PrefixCache(num_blocks, block_size)
        self.pools = [
            keras.Variable(
                ops.zeros((2 * (num_blocks + 1), block_size, *c.shape[3:]), c.dtype),
                trainable=False,
            )
            for c in keras.tree.flatten(self.caches)
        ]

    @property
    def variables(self):
        """The slots' caches, token counts and prefix cache pool (what the
        compiled calls assign)."""
        return [*keras.tree.flatten(self.caches), self.counts, *self.pools]

    # === Compiled functions ===

    def _next_tokens(self, hidden, settings, positions, counts, allowed):
        """`(tokens, logprobs, top_values, top_ids)` of each row from its
        last hidden state, choosing among its `allowed` tokens; the last
        two (batch, top_logprobs)."""
        temperature, top_p, seed, presence, frequency = settings
        logits = ops.cast(self.model.logits(hidden)[:, 0, :], "float32")
        penalized = ops.cond(
            ops.any((presence != 0.0) | (frequency != 0.0)),
            lambda: presence_frequency_penalty(logits, counts, presence, frequency),
            lambda: logits,
        )
        penalized = ops.where(allowed, penalized, float("-inf"))
        tokens = sample_tokens(penalized, temperature, top_p, seed, positions)
        if not self.top_logprobs:
            batch = ops.shape(tokens)[0]
            none = ops.zeros((batch, 0), "float32"), ops.zeros((batch, 0), "int32")
            return tokens, chosen_log_probabilities(logits, tokens), *none
        return tokens, *chosen_log_probabilities(logits, tokens, self.top_logprobs)

    def _prefill_function(
        self, tokens, length, slot, settings, allowed, write_ids=None
    ):
        backbone = self.model.backbone
        small = backbone.empty_cache(1, self.max_length)
        # Index 0 (a Python int): the prompt attends to its own keys only.
        hidden, small = backbone.call_with_cache(tokens, small, 0)
        return self._prefilled(hidden, small, length - 1, length, slot, settings,
                               allowed, write_ids)  # fmt: skip

    def _prefill_after_function(
        self, tokens, length, start, slot, settings, allowed, read_ids, write_ids
    ):
        """The prefill of a prompt's tokens from `start` on (`tokens`),
        after the cached blocks `read_ids` (its positions 0 to start - 1)."""
        backbone = self.model.backbone
        small = self._pool_rows(read_ids)
        # The blocks past `start` hold other keys, which the causal mask
        # hides until this prefill and the decoding overwrite them.
        hidden, small = backbone.call_with_cache(tokens, small, start)
        return self._prefilled(
            hidden, small, length - 1 - start, length, slot, settings, allowed,
            write_ids,
        )  # fmt: skip

    def _prefilled(
        self, hidden, small, last, length, slot, settings, allowed, write_ids
    ):
        """The first new token from the prompt's last hidden state (at
        `last` in `hidden`), `small` written into the slot and the blocks
        `write_ids` into the pool."""
        last = ops.take(hidden, ops.reshape(last, [1]), axis=1)  # (1, 1, D)
        no_counts = ops.zeros((1, self.counts.shape[1]))
        first, logprob, top_values, top_ids = self._next_tokens(
            last, settings, ops.reshape(length, [1]), no_counts, allowed
        )
        rows = keras.tree.flatten(small)
        for variable, row in zip(keras.tree.flatten(self.caches), rows, strict=True):
            start = [slot] + [0] * (len(row.shape) - 1)
            variable.assign(ops.slice_update(variable.value, start, row))
        counts = ops.one_hot(first, self.counts.shape[1])  # (1, V)
        self.counts.assign(ops.slice_update(self.counts.value, [slot, 0], counts))
        if write_ids is not None:
            self._store_blocks(rows, write_ids)
        return first[0], logprob[0], top_ids[0], top_values[0]

    def _slot_rows(self, slot):
        """The slot's caches, (1, ...) each, flat."""
        # A gather: XLA compiles `ops.slice`'s start as a constant, one
        # program per slot.
        index = ops.reshape(slot, [1])
        caches = keras.tree.flatten(self.caches)
        return [ops.take(v.value, index, axis=0) for v in caches]

    def _keep_function(self, slot, write_ids):
        """The slot's rows' blocks `write_ids` written into the pool."""
        self._store_blocks(self._slot_rows(slot), write_ids)
        return slot

    def _extend_function(self, tokens, length, start, slot, settings, allowed):
        """The prefill of a prompt's tokens from `start` on (`tokens`), after
        its positions 0 to start - 1, which its slot holds (a chunk)."""
        backbone = self.model.backbone
        structure = backbone.empty_cache(1, self.max_length)
        small = keras.tree.pack_sequence_as(structure, self._slot_rows(slot))
        hidden, small = backbone.call_with_cache(tokens, small, start)
        return self._prefilled(
            hidden, small, length - 1 - start, length, slot, settings, allowed, None
        )

    def _pool_rows(self, read_ids):
        """One slot's caches (1, 2, max_length, ...) made of the pool's
        blocks `read_ids` (one id per block of the row, in order)."""
        stride = self.pools[0].shape[0] // 2
        ids = ops.concatenate([read_ids, read_ids + stride])  # keys, values
        rows = []
        for pool in self.pools:
            blocks = ops.take(pool.value, ids, axis=0)  # (2 * row blocks, B, ...)
            row = ops.reshape(blocks, (1, 2, -1, *pool.shape[2:]))
            rows.append(row[:, :, : self.max_length])
        structure = self.model.backbone.empty_cache(1, self.max_length)
        return keras.tree.pack_sequence_as(structure, rows)

    def _store_blocks(self, rows, write_ids):
        """Writes each block i of the slot's `rows` into the pool's block
        `write_ids[i]` (the spare block: not kept)."""
        stride = self.pools[0].shape[0] // 2
        ids = ops.expand_dims(ops.concatenate([write_ids, write_ids + stride]), 1)
        extra = self._row_blocks * self.block_size - self.max_length
        for pool, row in zip(self.pools, rows, strict=True):
            if extra:
                row = ops.pad(row, [(0, 0), (0, 0), (0, extra)] + [(0, 0)] * (
                    len(row.shape) - 3
                ))  # fmt: skip
            blocks = ops.reshape(row, (-1, *pool.shape[1:]))  # (2 * row blocks, B, ...)
            pool.assign(ops.scatter_update(pool.value, ids, blocks))

    def _decode_function(self, tokens, positions, settings, allowed):
        backbone = self.model.backbone
        batch = ops.shape(tokens)[0]
        last_position = self.max_length - 1
        caches = keras.tree.map_structure(lambda v: v.value, self.caches)
        vocabulary_size = self.counts.shape[1]

        def step(i, state):
            caches, counts, tokens, positions, out = state
            hidden, caches = backbone.call_with_cache(
                tokens[:, None], caches, positions
            )
            positions = ops.minimum(positions + 1, last_position)
            tokens, *scores = self._next_tokens(
                hidden, settings, positions, counts, allowed
            )
            counts = counts + ops.one_hot(tokens, vocabulary_size)
            # Step i fills column i of each output (steps are axis 1).
            column = ops.arange(self.steps_per_call) == i
            out = tuple(
                ops.where(
                    ops.reshape(column, [1, -1] + [1] * (len(o.shape) - 2)),
                    ops.expand_dims(value, 1),
                    o,
                )
                for o, value in zip(out, (tokens, *scores), strict=True)
            )
            return caches, counts, tokens, positions, out

        steps, k = self.steps_per_call, self.top_logprobs
        out = (
            ops.zeros((batch, steps), "int32"),
            ops.zeros((batch, steps), "float32"),
            ops.zeros((batch, steps, k), "float32"),
            ops.zeros((batch, steps, k), "int32"),
        )
        caches, counts, _, _, out = ops.fori_loop(
            0, steps, step, (caches, self.counts.value, tokens, positions, out)
        )
        for variable, value in zip(
            keras.tree.flatten(self.caches), keras.tree.flatten(caches), strict=True
        ):
            variable.assign(value)
        self.counts.assign(counts)
        return out

    # === Host side ===

    def prefill(
        self, slot, prompt, temperature=0.0, top_p=1.0, seed=0,
        presence_penalty=0.0, frequency_penalty=0.0, allowed=None,
    ):  # fmt: skip
        """Writes `prompt`'s keys and values into `slot`; the first new token
        (one of the `allowed` ones: bool (V,), None: any), its
        log-probability, the most likely tokens `(ids, logprobs)` (int32 and
        float32 (top_logprobs,), most likely first) and how many of the
        prompt's tokens came from the prefix cache (0 without one).

        The prompt (or its tokens after the cached blocks) is padded to a
        power of two of at least 32 tokens (one compiled prefill per padded
        length, so a handful in all); the padded positions lie past the
        prompt and are overwritten before any query can see them.
        """
        length = len(prompt)
        if not 0 < length < self.max_length:
            raise ValueError(
                f"A prompt must have 1 to {self.max_length - 1} tokens. "
                f"Received: {length} tokens"
            )
        settings = _settings(
            [temperature], [top_p], [seed], [presence_penalty], [frequency_penalty]
        )
        allowed = self._allowed(allowed, 1)
        cache = self.prefix_cache
        if cache is None:
            out = self._prefill(
                self._padded(prompt, self.padded_length(length)), np.int32(length),
                np.int32(slot), settings, allowed,
            )  # fmt: skip
            return _prefill_result(out, 0)
        matched = cache.match(prompt)
        claimed = cache.store(prompt, len(matched))
        write_ids = np.full(self._row_blocks, cache.num_blocks, "int32")
        for i, block in claimed:
            write_ids[i] = block
        start = len(matched) * self.block_size
        try:
            if not matched:
                out = self._prefill(
                    self._padded(prompt, self.padded_length(length)),
                    np.int32(length), np.int32(slot), settings, allowed, write_ids,
                )  # fmt: skip
            else:
                read_ids = np.zeros(self._row_blocks, "int32")
                read_ids[: len(matched)] = matched
                rest = prompt[start:]
                padded = min(self.padded_length(len(rest)), self.max_length - start)
                out = self._prefill_after(
                    self._padded(rest, padded), np.int32(length), np.int32(start),
                    np.int32(slot), settings, allowed, read_ids, write_ids,
                )  # fmt: skip
        except BaseException:
            cache.discard(prompt, claimed)  # their blocks were not written
            raise
        return _prefill_result(out, start)

    def compile_prefill(self, length):
        """Compiles the prefill of `length` tokens (a padded length), and
        with a prefix cache the prefill of `length` tokens after cached
        blocks, by running them on slot 0 (whose rows they overwrite) with
        nothing cached or kept."""
        tokens, settings = self._padded([], length), _settings(*GREEDY_ROW)
        allowed = self._allowed(None, 1)
        if self.prefix_cache is None:
            self._prefill(tokens, np.int32(length), np.int32(0), settings, allowed)
            return
        ids = np.zeros(self._row_blocks, "int32")
        spare = ids + self.prefix_cache.num_blocks
        self._prefill(tokens, np.int32(length), np.int32(0), settings, allowed, spare)
        self._prefill_after(
            tokens, np.int32(length), np.int32(0), np.int32(0), settings, allowed,
            ids, spare,
        )  # fmt: skip

    def _allowed(self, allowed, rows):
        """`allowed` as bool (rows, V); None: every token."""
        shape = (rows, self.counts.shape[1])
        if allowed is None:
            return np.ones(shape, bool)
        allowed = np.asarray(allowed, bool).reshape(shape)
        if not allowed.any(axis=1).all():
            raise ValueError("Every row must allow at least one token.")
        return allowed

    def extend(
        self, slot, tokens, start, temperature=0.0, top_p=1.0, seed=0,
        presence_penalty=0.0, frequency_penalty=0.0, allowed=None,
    ):  # fmt: skip
        """Prefills `tokens` at positions `start` on into `slot`, which holds
        the prompt's first `start` tokens (an earlier `prefill` or `extend`:
        a long prompt in chunks); returns what `prefill` returns, the next
        token that of the whole prompt so far (0 cached tokens).

        The chunk is padded to a power of two of at least 32 tokens (at
        most up to `max_length`), as `prefill`'s prompts are.
        """
        length = start + len(tokens)
        if not 0 < start < length < self.max_length:
            raise ValueError(
                f"A chunk must lie within positions 1 to {self.max_length - 1} "
                f"after the first. Received: {len(tokens)} tokens from {start}"
            )
        settings = _settings(
            [temperature], [top_p], [seed], [presence_penalty], [frequency_penalty]
        )
        padded = min(self.padded_length(len(tokens)), self.max_length - start)
        out = self._extend(
            self._padded(tokens, padded), np.int32(length), np.int32(start),
            np.int32(slot), settings, self._allowed(allowed, 1),
        )  # fmt: skip
        return _prefill_result(out, 0)

    def cached_length(self, prompt):
        """How many of `prompt`'s first tokens `prefill` would take from
        the prefix cache (whole blocks; 0 without one)."""
        if self.prefix_cache is None:
            return 0
        return len(self.prefix_cache.match(prompt)) * self.block_size

    def keep(self, slot, tokens):
        """Adds the whole blocks of `tokens` that the prefix cache does not
        hold yet, their keys and values read from `slot`, which must hold
        them at positions 0 to len(tokens) - 1 (a finished request's prompt
        and answer, its last token aside: not fed). The number of blocks
        added (0 without a prefix cache)."""
        cache = self.prefix_cache
        if cache is None:
            return 0
        claimed = cache.store(tokens, 0)
        if claimed:
            write_ids = np.full(self._row_blocks, cache.num_blocks, "int32")
            for i, block in claimed:
                write_ids[i] = block
            try:
                self._keep(np.int32(slot), write_ids)
            except BaseException:
                cache.discard(tokens, claimed)
                raise
        return len(claimed)

    def compile_keep(self):
        """Compiles `keep`'s copy (writing only the spare block)."""
        if self.prefix_cache is not None:
            spare = np.full(self._row_blocks, self.prefix_cache.num_blocks, "int32")
            self._keep(np.int32(0), spare)

    def _padded(self, prompt, padded):
        tokens = np.full((1, padded), self.model.fill_id, "int32")
        tokens[0, : len(prompt)] = prompt
        return tokens

    def padded_length(self, length):
        """The compiled prefill's length for a prompt of `length` tokens: a
        power of two of at least 32, at most `max_length`."""
        return min(max(32, 1 << (length - 1).bit_length()), self.max_length)

    def decode(
        self, tokens, positions, temperature=None, top_p=None, seed=None,
        presence_penalty=None, frequency_penalty=None, allowed=None,
    ):  # fmt: skip
        """`steps_per_call` new tokens per slot, their log-probabilities
        (int32 and float32 (num_slots, steps)) and each step's most likely
        tokens `(ids, logprobs)` (int32 and float32 (num_slots, steps,
        top_logprobs), most likely first).

        Args:
            tokens: per slot, the last token (not yet in the cache).
            positions: per slot, that token's position.
            temperature, top_p, seed, presence_penalty, frequency_penalty:
                per slot, the sampling settings (default: greedy, none).
            allowed: bool (num_slots, V), the tokens each slot may choose
                at each of the call's steps (default: any).
        """
        n = self.num_slots
        settings = _settings(
            [0.0] * n if temperature is None else temperature,
            [1.0] * n if top_p is None else top_p,
            [0] * n if seed is None else seed,
            [0.0] * n if presence_penalty is None else presence_penalty,
            [0.0] * n if frequency_penalty is None else frequency_penalty,
        )
        out, logprobs, top_values, top_ids = self._decode(
            np.asarray(tokens, "int32"), np.asarray(positions, "int32"), settings,
            self._allowed(allowed, n),
        )  # fmt: skip
        top = np.asarray(top_ids), np.asarray(top_values)
        return np.asarray(out), np.asarray(logprobs), top


GREEDY_ROW = ([0.0], [1.0], [0], [0.0], [0.0])  # `_settings` of one greedy row


def _prefill_result(out, cached):
    first, logprob, top_ids, top_values = out
    top = np.asarray(top_ids), np.asarray(top_values)
    return int(first), float(logprob), top, cached


def _settings(temperature, top_p, seed, presence_penalty, frequency_penalty):
    return (
        np.asarray(temperature, "float32"),
        np.asarray(top_p, "float32"),
        np.array([row_seed(s) for s in seed], "int32"),
        np.asarray(presence_penalty, "float32"),
        np.asarray(frequency_penalty, "float32"),
    )

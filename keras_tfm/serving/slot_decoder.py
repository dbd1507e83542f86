"""The model side of continuous batching: a cache of fixed slots, two
compiled functions over it.

`SlotDecoder` owns one key/value cache per decoder block with `num_slots`
rows of `max_length` positions. A request is prefilled alone (batch 1) and
its keys and values are copied into its slot's rows; then one compiled call
decodes `steps_per_call` tokens for every slot at once, each slot at its own
position (a (batch,) `cache_update_index`: the per-row writes and masks of
`MultiHeadSelfAttention`), so a row never sees another row's keys, and a
slot's stale positions (an earlier request's) are never attended to.

Each call hands the whole cache to XLA and gets a new one back (TensorFlow
does not donate input buffers), a copy per call: decoding a few steps per
call amortises it, at the price of a request joining only between calls.
"""

import numpy as np
import tensorflow as tf
from keras import ops

from keras_tfm.serving.slot_sampler import row_seed, sample_tokens
from keras_tfm.validation import check_positive_int


class SlotDecoder:
    """Prefill-into-a-slot and multi-slot decoding of a causal LM.

    Args:
        model: a `keras_tfm.models.CausalLM` (decoder-only).
        num_slots: how many requests decode together.
        max_length: positions per slot (prompt plus answer), at most the
            model's `max_sequence_length`.
        steps_per_call: tokens decoded per slot in one compiled call.

    Example:
    >>> from keras_tfm.serving import SlotDecoder
    >>> backbone = keras_tfm.models.DecoderBackbone(
    ...     vocabulary_size=50, num_layers=1, num_heads=2, hidden_dim=16,
    ...     intermediate_dim=32, max_sequence_length=32)
    >>> decoder = SlotDecoder(keras_tfm.models.CausalLM(backbone), 2, 32, 2)
    >>> first = decoder.prefill(slot=1, prompt=[5, 6, 7], temperature=0.0,
    ...                         top_p=1.0, seed=0)
    >>> decoder.decode([0, first], [0, 3], [0.0, 0.0], [1.0, 1.0], [0, 0]).shape
    (2, 2)
    """

    def __init__(self, model, num_slots, max_length, steps_per_call=4):
        self.model = model
        self.num_slots = check_positive_int("num_slots", num_slots)
        self.max_length = check_positive_int("max_length", max_length)
        self.steps_per_call = check_positive_int("steps_per_call", steps_per_call)
        limit = model.backbone.max_sequence_length
        if max_length > limit:
            raise ValueError(
                "`max_length` must be at most the model's max_sequence_length "
                f"({limit}). Received: max_length={max_length}"
            )
        self.caches = model.backbone.empty_cache(num_slots, max_length)
        # No autograph (the loops are ops.while_loop): its conversion cache
        # gave `logits` another method's converted code in a long test run.
        self._prefill = tf.function(
            self._prefill_function, jit_compile=True, autograph=False
        )
        self._decode = tf.function(
            self._decode_function, jit_compile=True, autograph=False
        )

    # === Compiled functions ===

    def _next_tokens(self, hidden, settings, positions):
        logits = self.model.logits(hidden)[:, 0, :]
        return sample_tokens(logits, *settings, positions)

    def _prefill_function(self, caches, tokens, length, slot, settings):
        backbone = self.model.backbone
        small = backbone.empty_cache(1, self.max_length)
        # Index 0 (a Python int): the prompt attends to its own keys only.
        hidden, small = backbone.call_with_cache(tokens, small, 0)
        last = ops.take(hidden, ops.reshape(length - 1, [1]), axis=1)  # (1, 1, D)
        first = self._next_tokens(last, settings, ops.reshape(length, [1]))
        caches = tuple(
            ops.slice_update(cache, [slot, 0, 0, 0, 0], row)
            for cache, row in zip(caches, small, strict=True)
        )
        return caches, first[0]

    def _decode_function(self, caches, tokens, positions, settings):
        backbone = self.model.backbone
        batch = ops.shape(tokens)[0]
        last_position = self.max_length - 1

        def step(i, state):
            caches, tokens, positions, out = state
            hidden, caches = backbone.call_with_cache(
                tokens[:, None], caches, positions
            )
            positions = ops.minimum(positions + 1, last_position)
            tokens = self._next_tokens(hidden, settings, positions)
            column = ops.cast(ops.arange(self.steps_per_call) == i, "int32")
            return caches, tokens, positions, out + tokens[:, None] * column

        out = ops.zeros((batch, self.steps_per_call), "int32")
        caches, _, _, out = ops.fori_loop(
            0, self.steps_per_call, step, (caches, tokens, positions, out)
        )
        return caches, out

    # === Host side ===

    def prefill(self, slot, prompt, temperature, top_p, seed):
        """Writes `prompt`'s keys and values into `slot`; the first new token.

        The prompt is padded to a power of two of at least 32 tokens (one
        compiled prefill per padded length, so a handful in all); the padded
        positions lie past the prompt and are overwritten before any query
        can see them.
        """
        length = len(prompt)
        if not 0 < length < self.max_length:
            raise ValueError(
                f"A prompt must have 1 to {self.max_length - 1} tokens. "
                f"Received: {length} tokens"
            )
        padded = min(max(32, 1 << (length - 1).bit_length()), self.max_length)
        tokens = np.full((1, padded), self.model.fill_id, "int32")
        tokens[0, :length] = prompt
        settings = _settings([temperature], [top_p], [seed])
        self.caches, first = self._prefill(
            self.caches, tokens, np.int32(length), np.int32(slot), settings
        )
        return int(first)

    def decode(self, tokens, positions, temperature, top_p, seed):
        """`steps_per_call` new tokens per slot, int32 (num_slots, steps).

        Args:
            tokens: per slot, the last token (not yet in the cache).
            positions: per slot, that token's position.
            temperature, top_p, seed: per slot, the sampling settings.
        """
        settings = _settings(temperature, top_p, seed)
        self.caches, out = self._decode(
            self.caches,
            np.asarray(tokens, "int32"),
            np.asarray(positions, "int32"),
            settings,
        )
        return np.asarray(out)


def _settings(temperature, top_p, seed):
    return (
        np.asarray(temperature, "float32"),
        np.asarray(top_p, "float32"),
        np.array([row_seed(s) for s in seed], "int32"),
    )

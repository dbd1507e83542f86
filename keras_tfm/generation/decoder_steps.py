"""A decoder-only model seen as cached steps: what chat reuse and drafts run.

`DecoderSteps(model)` wraps a `CausalLM` (or the first `num_layers` of its
blocks, a layer-truncated draft that shares the model's weights) behind two
operations on a key/value cache that outlives one call:

    logits, caches = steps(token_ids, caches, index, padding_mask)
    caches = steps.extend(tokens, caches, start, stop)

`steps(...)` writes the keys and values of `token_ids` (positions
`index ... index + seq - 1`) into `caches` and returns the next-token
logits; `extend` fills positions `start ... stop - 1` of a (batch, length)
token buffer in chunks (of 128 tokens, then of 64) inside `while` loops, so
a prompt of any length compiles once per buffer length.

The caches are a tuple with one tensor (batch, 2, max_length, kv_heads,
head_dim) per block, as `DecoderBackbone.call_with_cache` takes them.
"""


from keras_tfm.generation.cached_steps import cache_padding_mask
from keras_tfm.generation.decode_loop import chunked_prefill
from keras_tfm.layers.attention_cache import AttentionCache
from keras_tfm.validation import check_positive_int

EXTEND_CHUNKS = (128, 64)
"""Tokens written per pass by `DecoderSteps.extend`: whole chunks of 128
while they fit, then chunks of 64, in two loops one after the other (no
conditional: XLA compiled one around two copies of the model, and a warm
chat turn measured slower). At batch 1 a pass costs about the same for 16
or 64 tokens (reading the weights dominates): a warm turn of up to 64 new
tokens is one pass, a cold prompt of 1,049 tokens 9 (17 in chunks of 64)."""


class DecoderSteps:
    """Cached forward steps of a decoder-only language model.

    Args:
        model: a `keras_tfm.models.CausalLM`.
        num_layers: run only the first `num_layers` blocks, then the final
            norm and the head (a layer-truncated draft sharing `model`'s
            weights). None: all blocks.

    Example:
    >>> backbone = keras_tfm.models.DecoderBackbone(
    ...     vocabulary_size=50, num_layers=2, num_heads=2, hidden_dim=16,
    ...     intermediate_dim=32, max_sequence_length=16)
    >>> steps = DecoderSteps(keras_tfm.models.CausalLM(backbone), num_layers=1)
    >>> caches = steps.empty_cache(1, 16)
    >>> len(caches), tuple(caches[0].shape)
    (1, (1, 2, 16, 2, 8))
    >>> logits, caches = steps(np.array([[5, 6]]), caches, 0)
    >>> tuple(logits.shape)
    (1, 2, 50)
    """

    def __init__(self, model, num_layers=None):
        backbone = getattr(model, "backbone", None)
        if not callable(getattr(backbone, "embed", None)) or not hasattr(
            backbone, "transformer_layers"
        ):
            raise ValueError(
                "`model` must be a decoder-only `CausalLM` (a sequence-to-"
                "sequence model's decoder reads its encoder's output). "
                f"Received: model={type(model).__name__}"
            )
        blocks = backbone.transformer_layers
        if num_layers is not None:
            check_positive_int("num_layers", num_layers)
            if num_layers > len(blocks):
                raise ValueError(
                    f"`num_layers` must be at most the model's {len(blocks)} "
                    f"blocks. Received: num_layers={num_layers}"
                )
            blocks = blocks[:num_layers]
        self.model = model
        self.backbone = backbone
        self.blocks = tuple(blocks)

    def __eq__(self, other):
        # Equal steps share compiled loops (`SpeculativeDecoder` keys by them).
        return (
            isinstance(other, DecoderSteps)
            and other.model is self.model
            and other.num_layers == self.num_layers
        )

    def __hash__(self):
        return hash((id(self.model), self.num_layers))

    @property
    def num_layers(self):
        return len(self.blocks)

    def empty_cache(self, batch_size, max_length):
        """One zero cache (batch, 2, max_length, kv_heads, head_dim) per block."""
        return tuple(block.empty_cache(batch_size, max_length) for block in self.blocks)

    def hidden(self, token_ids, caches, index, padding_mask=None, final_norm=True):
        """`(hidden, caches)`: the final hidden states of `token_ids`
        (before the backbone's final norm if `final_norm` is False)."""
        x = self.backbone.embed(token_ids, start_index=index)
        updated = []
        for block, cache in zip(self.blocks, caches, strict=True):
            x, cache = block(
                x, padding_mask=padding_mask, cache=AttentionCache(cache, index)
            )
            updated.append(cache)
        if final_norm and self.backbone.final_norm is not None:
            x = self.backbone.final_norm(x)
        return x, tuple(updated)

    def __call__(self, token_ids, caches, index, padding_mask=None):
        """`(logits, caches)`: float32 (batch, seq, vocabulary_size) logits."""
        hidden, caches = self.hidden(token_ids, caches, index, padding_mask)
        return self.model.logits(hidden), caches

    def padding_mask_of(self, tokens):
        return cache_padding_mask(self.backbone, tokens)

    def extend(self, tokens, caches, start, stop, chunk_lengths=EXTEND_CHUNKS):
        """`caches` with the keys and values of `tokens[:, start:stop]` written.

        Runs `decode_loop.chunked_prefill` from `start` (`start` and
        `stop` may be tensors). The last chunk may cover positions past
        `stop`: their keys are written too and are overwritten, unread, by
        the decoding that follows (a query never sees a later position).

        Args:
            tokens: int (batch, length), the token buffer (its padding ids
                are masked out of attention, as in `generate`).
            caches: see `empty_cache`, `length` positions each.
            start, stop: the positions to fill.
            chunk_lengths: tokens per pass, largest first.

        Returns:
            The updated caches.
        """
        padding_mask = self.padding_mask_of(tokens)

        def step(token_ids, caches, first):
            return self.hidden(token_ids, caches, first, padding_mask)[1]

        return chunked_prefill(step, tokens, caches, stop, chunk_lengths, begin=start)

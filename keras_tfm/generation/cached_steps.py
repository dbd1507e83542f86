"""The cached-step interface: what a model family supplies to generation.

Every decoding loop of `keras_tfm.generation` (the built-in samplers' loop,
beam search, a keras-hub sampler object, the streamed and sliding-window
loops, speculative decoding) drives a model through these methods only;
`CausalLM` (decoder-only) and `Seq2SeqLM` (encoder-decoder) implement them.
keras-hub's `CausalLM.call_with_cache` / `generate_step` split is the model.
"""

from typing import Protocol

from keras import ops


class CachedSteps(Protocol):
    """A generating model, as the loops see it.

    Attributes:
        is_decoder_only: True for a causal LM (the decoder prompt is the
            prompt), False for an encoder-decoder model (the decoder prompt
            is its start token, and a context is read at every step).
        fill_id: the id written into padded slots.
        prompt_through_step: streamed prompts of at most this many tokens
            go through `decode_step` one by one (0: always `prefill`).
    """

    is_decoder_only: bool
    fill_id: int
    prompt_through_step: int

    def generation_inputs(self, rows):
        """`(encoder_inputs, decoder_rows, skip)` of the checked input rows;
        `skip` leading decoder tokens are not returned."""

    def check_generation_length(self, rows, max_new_tokens):
        """Whether decoding must slide its window (raises if it cannot)."""

    def encoder_context(self, encoder_inputs):
        """What every decoding step reads besides the cache (traced)."""

    def repeat_context(self, context, num_beams):
        """`context` with each row repeated per beam."""

    def empty_cache(self, batch_size, max_length):
        """A zero key/value cache."""

    def prefill(self, context, tokens, start):
        """The cache filled from `tokens[:, :start]` (`start` may be a tensor)."""

    def decode_step(self, context, tokens, cache, index):
        """`(logits, cache)`: float32 (batch, V) logits for position `index`."""

    def default_stop_token_ids(self):
        """The ids that end a row when the call names none (or None)."""


def cache_padding_mask(backbone, tokens):
    """The padding mask a cached step reads, or None without a padding id.

    Without a padding id every position is real and a cached step needs no
    mask. A mask of all ones would be a constant that the prefill's two
    chunk loops both capture, and TensorFlow copies such a constant into
    each loop under names (`ones/_0`, `ones/_1`) given in an order that
    varies between processes: the XLA program's fingerprint, the key of the
    persistent compilation cache, then varied too, and a second process
    compiled again about half the time.

    Example:
    >>> backbone = keras_tfm.models.DecoderBackbone(
    ...     vocabulary_size=8, num_layers=1, num_heads=1, hidden_dim=4,
    ...     intermediate_dim=8, max_sequence_length=4, padding_id=None)
    >>> cache_padding_mask(backbone, np.array([[1, 2]])) is None
    True
    >>> backbone.padding_id = 0
    >>> ops.convert_to_numpy(cache_padding_mask(backbone, np.array([[1, 0]])))
    array([[ True, False]])
    """
    if backbone.padding_id is None:
        return None
    return backbone.padding_mask_of(tokens)


def previous_token(tokens, index):
    """`tokens[:, index - 1 : index]` for a scalar tensor `index`, as a gather.

    XLA compiles `tf.slice` (`ops.slice`) with its start as a compile-time
    constant: called with a new `index`, a compiled step would be compiled
    again (5 s a token for SmolLM2 on a 2-core CPU). A gather takes it at
    run time.
    """
    return ops.take(tokens, ops.reshape(index - 1, [1]), axis=1)

"""The cached-step interface: what a model family supplies to generation.

Every decoding loop of `keras_tfm.generation` (the built-in samplers' loop,
beam search, a keras-hub sampler object, the streamed and sliding-window
loops, speculative decoding) drives a model through these methods only;
`CausalLM` (decoder-only) and `Seq2SeqLM` (encoder-decoder) implement them.
keras-hub's `CausalLM.call_with_cache` / `generate_step` split is the model.
"""

from typing import Protocol


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

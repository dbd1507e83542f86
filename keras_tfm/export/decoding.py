"""The decoding loop of exported graphs: `CausalLM.generate`'s own, as ops.

An exported signature decodes with the engine's loop of the built-in
samplers (`keras_tfm.generation.loops.decode_function`: prefill by chunks,
then `keras_tfm.generation.decode_loop.decode`), with the per-row settings
as tensors, so temperature, top-k, top-p, the seed and the stop ids are
inputs of one traced loop that every generative signature shares (traced
once per export, not once per signature). The buffer lengths are the graph
forms of `keras_tfm.generation.buffers`' rule, and the prompt mask and the
cut after a stop id are computed as `generate` computes them, so an
exported signature gives `generate`'s tokens, sampled ones included: the
random stream is the same function of (seed, position, token id).
"""

import tensorflow as tf

from keras_tfm.generation import (
    BeamSearchSampler,
    backend,
    buffers,
    loops,
    token_inputs,
)
from keras_tfm.generation.generation_config import GenerationConfig, settings_tensors
from keras_tfm.generation.outputs import truncated_lengths_graph


def seed_word(seed):
    """`generation_config.seed_word` of an int64 scalar tensor: int32.

    Example:
    >>> from keras_tfm.generation.generation_config import seed_word as py
    >>> seeds = [0, 7, -1, 2**40 + 5, -(2**63)]
    >>> [int(seed_word(tf.constant(s, tf.int64))) for s in seeds] == [
    ...     py(s) for s in seeds]
    True
    """
    seed = tf.cast(seed, tf.int64)
    # Python's `seed >> 64` is -1 for a negative int64, else 0.
    sign = tf.where(seed < 0, tf.constant(-1, tf.int64), tf.constant(0, tf.int64))
    word = tf.bitwise.bitwise_xor(seed, tf.bitwise.right_shift(seed, 32))
    word = tf.bitwise.bitwise_xor(word, sign)
    return tf.bitcast(tf.cast(tf.bitwise.bitwise_and(word, 0xFFFFFFFF), tf.uint32),
                      tf.int32)  # fmt: skip


def settings(batch, stop_token_ids, temperature=0.0, top_k=0, top_p=1.0, seed=0):
    """The loop's settings dict for `batch` rows, each with the same values.

    The entries and their padding are `settings_tensors`' (processors off);
    `temperature` 0 is greedy, `top_k` 0 and `top_p` 1 are off.
    """
    template = settings_tensors([GenerationConfig(seed=0)], stop_token_ids or None)
    rows = {
        name: tf.tile(tf.constant(value), [batch] + [1] * (value.ndim - 1))
        for name, value in template.items()
    }
    given = {"temperature": temperature, "top_k": top_k, "top_p": top_p}
    for name, value in given.items():
        rows[name] = tf.fill([batch], tf.cast(value, rows[name].dtype))
    rows["seed"] = tf.fill([batch], seed_word(seed))
    return rows


def _source_inputs(model, sources, maximum):
    # `Seq2SeqLM.generation_inputs`: padded to a multiple of 8, masked.
    lengths = tf.cast(sources.row_lengths(), tf.int32)
    longest = tf.reduce_max(lengths)
    tf.debugging.assert_less_equal(
        longest,
        maximum,
        message=f"A source is longer than max_sequence_length={maximum}",
    )
    width = buffers.rounded_length_graph(longest, maximum)
    source = sources.to_tensor(default_value=model.fill_id)
    source = tf.pad(source, [[0, 0], [0, width - tf.shape(source)[1]]],
                    constant_values=model.fill_id)  # fmt: skip
    mask = tf.sequence_mask(lengths, width)
    if model.backbone.padding_id is not None:
        mask &= source != model.backbone.padding_id
    return source, mask


class _BeamWithPenaltyInput(BeamSearchSampler):
    """Beam search whose length penalty is a tensor, set per call."""

    penalty = None

    def _penalty(self, lengths):
        return tf.pow((5.0 + tf.cast(lengths, tf.float32)) / 6.0, self.penalty)


class Decoder:
    """`decode(rows, max_new_tokens, settings)`: ragged new rows, as `generate`.

    Args:
        model: a `CausalLM` or a `Seq2SeqLM` (then rows are the sources).
        num_beams: also build beam search of this width (`beam`).
    """

    def __init__(self, model, num_beams=None):
        self.model = model
        self.seq2seq = not model.is_decoder_only
        self.loop = loops.decode_function(model)
        self.maximum = model.backbone.max_sequence_length
        self.beam_loop = None
        if num_beams:
            self.sampler = _BeamWithPenaltyInput(num_beams, padding_id=model.fill_id)
            stops = tuple(default_stops(model)) or None
            inner = loops.sampler_loop(model, self.sampler, stops, compile=False)

            def beam(encoder_inputs, tokens, mask, start, end, settings, penalty):
                self.sampler.penalty = penalty
                return inner(encoder_inputs, tokens, mask, start, end, settings)

            self.beam_loop = backend.compile_loop(beam)

    def _inputs(self, rows):
        """`(encoder_inputs, decoder_rows)` of ragged int32 `rows`."""
        if not self.seq2seq:
            return (), rows
        start = self.model.decoder_start_id()
        batch = rows.nrows(out_type=tf.int32)
        decoder_rows = tf.RaggedTensor.from_tensor(tf.fill([batch, 1], start))
        return _source_inputs(self.model, rows, self.maximum), decoder_rows

    def _buffer(self, decoder_rows, length):
        lengths = tf.cast(decoder_rows.row_lengths(), tf.int32)
        tokens = decoder_rows.to_tensor(default_value=self.model.fill_id)
        tokens = tf.pad(tokens, [[0, 0], [0, length - tf.shape(tokens)[1]]],
                        constant_values=self.model.fill_id)  # fmt: skip
        return tokens, tf.sequence_mask(lengths, length), lengths

    def decode(self, rows, max_new_tokens, settings):
        """The prompt and new tokens of each row (a seq2seq model: the new
        tokens), up to and including the first stop id past the prompt."""
        encoder_inputs, decoder_rows = self._inputs(rows)
        lengths = tf.cast(decoder_rows.row_lengths(), tf.int32)
        longest, shortest = tf.reduce_max(lengths), tf.reduce_min(lengths)
        tf.debugging.assert_positive(shortest, message="A prompt is empty")
        tf.debugging.assert_less_equal(
            longest + max_new_tokens,
            self.maximum,
            message=f"A prompt plus max_new_tokens exceeds max_sequence_length="
            f"{self.maximum} (the exported loop does not slide its window)",
        )
        needed = longest + max_new_tokens
        length = buffers.buffer_length_graph(needed, self.maximum)
        tokens, mask, lengths = self._buffer(decoder_rows, length)
        out = self.loop(encoder_inputs, tokens, mask, shortest, needed, settings)
        keep = tf.minimum(lengths + max_new_tokens, out["ends"])
        return self._skip(tf.RaggedTensor.from_tensor(out["tokens"], lengths=keep))

    def beam(self, rows, max_new_tokens, settings, length_penalty):
        """Beam search, as `generate(sampler="beam", num_beams=...)`."""
        encoder_inputs, decoder_rows = self._inputs(rows)
        lengths = tf.cast(decoder_rows.row_lengths(), tf.int32)
        longest, shortest = tf.reduce_max(lengths), tf.reduce_min(lengths)
        length = buffers.beam_buffer_length_graph(
            longest, max_new_tokens, self.maximum, exact=self.seq2seq
        )
        tokens, mask, lengths = self._buffer(decoder_rows, length)
        out = self.beam_loop(
            encoder_inputs, tokens, mask, shortest, longest + max_new_tokens,
            settings, tf.cast(length_penalty, tf.float32),
        )  # fmt: skip
        keep = lengths + max_new_tokens
        stops = default_stops(self.model)
        if stops:
            keep = truncated_lengths_graph(out, mask, stops, keep)
        return self._skip(tf.RaggedTensor.from_tensor(out, lengths=keep))

    def _skip(self, ids):
        return ids[:, 1:] if self.seq2seq else ids


def default_stops(model):
    """The model's default stop ids (its end token), checked."""
    stops = model.default_stop_token_ids()
    return tuple(
        token_inputs.check_stop_token_ids(stops, model.backbone.vocabulary_size) or ()
    )


def drop(ids, stop_token_ids):
    """Ragged `ids` without any of `stop_token_ids` (as `format_outputs`)."""
    if not stop_token_ids:
        return ids
    is_stop = tf.reduce_any(
        ids.flat_values[:, None] == tf.constant(stop_token_ids, ids.dtype), axis=-1
    )
    return tf.ragged.boolean_mask(ids, ~ids.with_flat_values(is_stop))

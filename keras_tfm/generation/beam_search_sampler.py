import math

import keras
import keras_hub
from keras import ops, tree

from keras_tfm.validation import check_positive_float, check_positive_int

# A log-probability that no real candidate reaches, finite so that sums and
# divisions never produce NaN.
_NEG = -1e9


@keras.saving.register_keras_serializable(package="keras_tfm")
class BeamSearchSampler(keras_hub.samplers.Sampler):
    """Beam search with a GNMT length penalty, finished beams and prompt masks.

    Keeps the `num_beams` hypotheses of highest score per batch row. A
    hypothesis's score is its summed log-probability divided by the GNMT
    length penalty of Wu et al. (2016):

        lp(n) = ((5 + n) / 6) ** length_penalty

    with `n` the number of tokens it generated (stop token included);
    `length_penalty=0` ranks by raw log-probability. A hypothesis that emits
    a stop token is finished: it keeps its score and is continued with
    `padding_id` only, while it competes with the live ones for a place in
    the beam. The loop ends when every hypothesis is finished.

    Unlike `keras_hub.samplers.BeamSampler`, positions where `mask` is True
    (the prompt of a row longer than the shortest one) are forced without
    changing any score, so a row of a padded batch is searched exactly as if
    it were alone; `num_beams=1` is greedy search.

    It follows the `keras_hub.samplers.Sampler` call contract: `next(prompt,
    cache, index)` returns `(logits, hidden_states, cache)` for position
    `index`; every tensor of `cache` has the batch first, and is repeated
    `num_beams` times per row (`ops.repeat(x, num_beams, axis=0)`) and
    reordered along with the beams. Any per-row tensor `next` closes over
    (e.g. an encoder output) must be repeated the same way by the caller.

    Args:
        num_beams: the beam width.
        length_penalty: the exponent alpha of the length penalty.
        padding_id: the token written after a stop token.
        temperature: logits are divided by it before the softmax.

    Call arguments:
        Those of `keras_hub.samplers.Sampler`: `next`, `prompt` (batch,
        max_length), `cache`, `index` (first position to fill), `mask`
        (batch, max_length), True where `prompt` is kept, `stop_token_ids`;
        and `process_logits(logits, prompt, index, mask)`, optional, applied
        to each step's logits (batch * num_beams rows) before the
        temperature and the log-softmax (e.g. `logit_processors`).

    Returns:
        The best hypothesis per row, (batch, max_length).

    Example:
    >>> def next(prompt, cache, index):
    ...     logits = ops.one_hot(ops.mod(prompt[:, index - 1] + 1, 5), 5)
    ...     return logits, None, cache
    >>> sampler = keras_tfm.generation.BeamSearchSampler(num_beams=2)
    >>> sampler(next, ops.array([[1, 0, 0]]), index=1)
    <tf.Tensor: shape=(1, 3), dtype=int32, numpy=array([[1, 2, 3]], dtype=int32)>
    """

    def __init__(self, num_beams=4, length_penalty=0.0, padding_id=0, temperature=1.0):
        super().__init__(temperature=check_positive_float("temperature", temperature))
        self.num_beams = check_positive_int("num_beams", num_beams)
        if (
            isinstance(length_penalty, bool)
            or not isinstance(length_penalty, (int, float))
            or not math.isfinite(length_penalty)
        ):
            raise ValueError(
                "`length_penalty` must be a finite number. "
                f"Received: length_penalty={length_penalty!r}"
            )
        self.length_penalty = float(length_penalty)
        self.padding_id = int(padding_id)

    def _penalty(self, lengths):
        lengths = ops.cast(lengths, "float32")
        return ops.power((5.0 + lengths) / 6.0, self.length_penalty)

    def __call__(
        self,
        next,
        prompt,
        cache=None,
        index=0,
        mask=None,
        stop_token_ids=None,
        hidden_states=None,
        model=None,
        process_logits=None,
    ):
        beams = self.num_beams
        batch_size, max_length = ops.shape(prompt)[0], ops.shape(prompt)[1]
        index = ops.cast(index, "int32")
        if mask is None:
            mask = ops.zeros_like(prompt, dtype="bool")
        mask = ops.cast(mask, "bool")
        has_cache = cache is not None
        cache = cache if has_cache else ()

        def create_beams(x):
            return ops.repeat(x, beams, axis=0)

        prompt, mask = create_beams(prompt), create_beams(mask)
        cache = tree.map_structure(create_beams, cache)
        # Only the first beam of each row is alive at the start.
        scores = ops.convert_to_tensor([[0.0] + [_NEG] * (beams - 1)], "float32")
        scores = ops.reshape(ops.broadcast_to(scores, (batch_size, beams)), (-1,))
        finished = ops.zeros_like(scores, dtype="bool")
        lengths = ops.zeros_like(scores, dtype="int32")

        def cond(prompt, cache, index, scores, finished, lengths):
            if stop_token_ids is None:
                return ops.convert_to_tensor(True)
            return ops.logical_not(ops.all(finished))

        def body(prompt, cache, index, scores, finished, lengths):
            logits, _, cache = next(prompt, cache, index)
            logits = ops.cast(logits, "float32")
            if process_logits is not None:
                logits = process_logits(logits, prompt, index, mask)
            logits = logits / self.temperature
            log_probs = ops.log_softmax(logits, axis=-1)  # (B*K, V)
            vocabulary_size = ops.shape(log_probs)[-1]
            forced = mask[:, index]
            forced_token = ops.one_hot(prompt[:, index], vocabulary_size) > 0
            padding = ops.one_hot(
                ops.full_like(prompt[:, index], self.padding_id), vocabulary_size
            )
            only = ops.where(forced[:, None], forced_token, padding > 0)
            frozen = ops.logical_or(forced, finished)
            log_probs = ops.where(
                frozen[:, None], ops.where(only, 0.0, _NEG), log_probs
            )
            candidates = scores[:, None] + log_probs  # (B*K, V)
            new_lengths = lengths + ops.cast(ops.logical_not(frozen), "int32")
            ranking = candidates / self._penalty(new_lengths)[:, None]
            flat = (-1, beams * vocabulary_size)
            _, top = ops.top_k(ops.reshape(ranking, flat), k=beams, sorted=False)
            beam_index = top // vocabulary_size  # (B, K)
            token = ops.reshape(top % vocabulary_size, (-1,))
            scores = ops.reshape(
                ops.take_along_axis(ops.reshape(candidates, flat), top, axis=1), (-1,)
            )

            def gather_beams(x):
                x = ops.reshape(x, (-1, beams) + tuple(ops.shape(x)[1:]))
                indices = beam_index
                for axis in range(2, len(x.shape)):
                    indices = ops.expand_dims(indices, axis)
                x = ops.take_along_axis(x, indices, axis=1)
                return ops.reshape(x, (-1,) + tuple(ops.shape(x)[2:]))

            prompt = gather_beams(prompt)
            if has_cache:
                cache = tree.map_structure(gather_beams, cache)
            lengths = gather_beams(new_lengths)
            was_frozen = gather_beams(frozen)
            finished = gather_beams(finished)
            token = ops.cast(token, prompt.dtype)
            prompt = ops.slice_update(prompt, [0, index], token[:, None])
            if stop_token_ids is not None:
                stopped = ops.zeros_like(finished)
                for stop_id in stop_token_ids:
                    stopped = ops.logical_or(stopped, ops.equal(token, stop_id))
                stopped = ops.logical_and(stopped, ops.logical_not(was_frozen))
                finished = ops.logical_or(finished, stopped)
            return prompt, cache, index + 1, scores, finished, lengths

        prompt, _, _, scores, _, lengths = self.run_loop(
            cond,
            body,
            loop_vars=(prompt, cache, index, scores, finished, lengths),
            maximum_iterations=(max_length - index),
            model=model,
        )
        ranking = ops.reshape(scores / self._penalty(lengths), (-1, beams))
        best = ops.argmax(ranking, axis=-1)[:, None, None]
        prompt = ops.reshape(prompt, (-1, beams, max_length))
        return ops.squeeze(ops.take_along_axis(prompt, best, axis=1), axis=1)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_beams": self.num_beams,
                "length_penalty": self.length_penalty,
                "padding_id": self.padding_id,
            }
        )
        return config

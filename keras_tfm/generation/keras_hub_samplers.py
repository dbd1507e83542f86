"""keras-hub's sampler objects in `generate`: `make_sampler` builds one from a
name and options, `run_sampler` drives one over a model's cached step, and
`reset_seed` restarts its random stream."""

import keras_hub
import numpy as np
from keras import ops
from keras_hub.src.utils.tensor_utils import any_equal

from keras_tfm.generation.beam_search_sampler import BeamSearchSampler
from keras_tfm.generation.generation_config import GenerationConfig
from keras_tfm.validation import check_positive_int


def make_sampler(
    sampler,
    temperature=None,
    top_k=None,
    top_p=None,
    num_beams=None,
    length_penalty=None,
    padding_id=0,
    seed=None,
):
    """A keras-hub sampler object for a `sampler` name (or instance) and options.

    `generate` uses it for beam search and for a sampler object; its
    built-in names run on per-row tensor settings instead (`decode_loop`).
    The settings are checked by `GenerationConfig` (a setting the sampler
    does not read is refused; `num_beams` > 1 with "greedy" is beam search).
    None means the sampler's default: temperature 1, top_k 5 for "top_k",
    top_p 0.1 for "top_p", length penalty 0.

    Returns `(sampler, key)`, `key` a hashable description used to cache the
    compiled decoding loop that owns the sampler's seed state.

    Example:
    >>> make_sampler("top_k", top_k=1)[1]
    ('top_k', 1.0, 1)
    >>> make_sampler("greedy", top_p=0.5)
    Traceback (most recent call last):
    ...
    ValueError: `top_p` is not read by sampler='greedy', so it would be ignored. Choose a sampler that reads it (top_p), e.g. sampler='top_p'. Received: top_p=0.5
    """  # noqa: E501
    if isinstance(sampler, keras_hub.samplers.Sampler):
        if num_beams is not None:
            check_positive_int("num_beams", num_beams)
        return sampler, ("instance", id(sampler))
    config = GenerationConfig(
        sampler=sampler, temperature=temperature, top_k=top_k, top_p=top_p,
        num_beams=num_beams, length_penalty=length_penalty, seed=seed,
    )  # fmt: skip
    sampler, values = config.sampler, config.row_values()
    temperature = 1.0 if config.temperature is None else config.temperature
    # The key holds only the options the sampler reads, so that calls that
    # differ in nothing it reads share one compiled loop.
    if sampler == "beam":
        num_beams = config.num_beams or 1
        length_penalty = config.length_penalty or 0.0
        instance = BeamSearchSampler(
            num_beams=num_beams,
            length_penalty=length_penalty,
            padding_id=padding_id,
            temperature=temperature,
        )
        return instance, ("beam", temperature, num_beams, length_penalty)
    if sampler == "greedy":
        return keras_hub.samplers.GreedySampler(), ("greedy",)
    if sampler == "random":
        instance = keras_hub.samplers.RandomSampler(seed=seed, temperature=temperature)
        return instance, ("random", temperature)
    if sampler == "top_k":
        top_k = values["top_k"]
        instance = keras_hub.samplers.TopKSampler(
            k=top_k, seed=seed, temperature=temperature
        )
        return instance, ("top_k", temperature, top_k)
    top_p = values["top_p"]
    instance = keras_hub.samplers.TopPSampler(
        p=top_p, k=top_k, seed=seed, temperature=temperature
    )
    return instance, ("top_p", temperature, top_p, top_k)


def reset_seed(sampler, seed):
    """Restarts a sampler's random stream at `seed`, so equal seeds repeat."""
    generator = getattr(sampler, "seed_generator", None)
    if seed is not None and generator is not None:
        generator.state.assign(np.array([seed, 0], generator.state.dtype))


def run_sampler(
    sampler, next, prompt, cache, index, mask, stop_token_ids, end=None, model=None
):
    """Decodes `prompt` from `index` to `end` (exclusive) with `sampler`.

    keras-hub's `Sampler.__call__` always decodes up to the end of the
    buffer; the buffer is rounded up (`buffers`) so that nearby lengths
    share one compiled loop, so that loop would decode up to 7 positions
    nobody asked for (and 8 steps instead of 1 for one new token). This is its
    loop with an end index (a tensor: no retrace). Samplers that define their
    own `__call__` (beam search) run to the end of the buffer as before.

    Args:
        sampler: a `keras_hub.samplers.Sampler`.
        next: `next(prompt, cache, index) -> (logits, hidden, cache)`, the
            model's cached step (keras-hub's contract).
        prompt: int (batch, length) buffer.
        cache: the loop-carried cache (any nest of tensors).
        index: the first position to decode.
        mask: bool (batch, length), True where `prompt` is given (kept).
        stop_token_ids: a tuple of ids or None.
        end: the position after the last one to decode; None: `length`.
        model: the model whose weights `next` reads. A sampler with its own
            loop (beam search) maps them into it on JAX; without them its
            loop reads each weight as a constant, copied into the program.

    Returns:
        The (batch, length) buffer with positions `index ... end - 1` decoded.
    """
    if type(sampler).__call__ is not keras_hub.samplers.Sampler.__call__:
        return sampler(
            next,
            prompt,
            cache=cache,
            index=index,
            mask=mask,
            stop_token_ids=stop_token_ids,
            model=model,
        )
    index = ops.cast(index, "int32")
    end = ops.shape(prompt)[1] if end is None else end
    end = ops.cast(end, "int32")
    mask = ops.cast(mask, "bool")

    positions = ops.arange(ops.shape(prompt)[1], dtype="int32")[None, :]

    def cond(prompt, cache, index):
        if stop_token_ids is None:
            return ops.convert_to_tensor(True, "bool")
        # Stop when every row has produced a new stop id. keras-hub's test
        # also reads the slots not decoded yet, which hold the fill id: a
        # model whose stop id is its padding id (GPT-2's scheme) stopped at once.
        decoded = ops.logical_and(~mask, positions < index)
        done = ops.any(any_equal(prompt, stop_token_ids, decoded), axis=-1)
        return ops.logical_not(ops.all(done))

    def body(prompt, cache, index):
        logits, _, cache = next(prompt, cache, index)
        token = sampler.get_next_token(sampler.compute_probabilities(logits))
        token = ops.cast(token, prompt.dtype)
        token = ops.where(mask[:, index], prompt[:, index], token)
        prompt = ops.slice_update(prompt, [0, index], token[:, None])
        return prompt, cache, index + 1

    prompt, _, _ = ops.while_loop(
        cond, body, (prompt, cache, index), maximum_iterations=end - index
    )
    return prompt

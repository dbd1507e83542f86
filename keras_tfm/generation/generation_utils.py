"""What both model families' `generate` share: input checks, samplers, caching.

The decoding loops themselves are keras-hub samplers (and
`BeamSearchSampler`) driven by each model's cached forward step.
"""

import keras
import keras_hub
import numpy as np
from keras import ops
from keras_hub.src.utils.tensor_utils import any_equal

from keras_tfm.data.detokenization import detokenize
from keras_tfm.generation import backend, buffers
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


def compile_loop(function, owners=(), jit_compile=True):
    """`backend.compile_loop`: `function` compiled for the Keras backend."""
    return backend.compile_loop(function, owners, jit_compile)


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


def bucket_length(length, multiple=8):
    """`buffers.rounded_length(length, multiple=multiple)`, under the name
    `ChatSession` still calls."""
    return buffers.rounded_length(length, multiple=multiple)


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


def check_stop_token_ids(stop_token_ids, vocabulary_size):
    """Normalizes `stop_token_ids` (None, an int or a list) to a tuple or None.

    An empty list or tuple means no stop token, as None does.
    """
    if stop_token_ids is None:
        return None
    if isinstance(stop_token_ids, list | tuple) and not stop_token_ids:
        return None
    ids = (stop_token_ids,) if isinstance(stop_token_ids, int) else stop_token_ids
    try:
        ids = tuple(ids)
    except TypeError:
        ids = None
    if not ids or not all(
        isinstance(i, (int, np.integer)) and 0 <= i < vocabulary_size for i in ids
    ):
        raise ValueError(
            "`stop_token_ids` must be None, an id or a list of token ids in "
            f"[0, {vocabulary_size}). Received: stop_token_ids={stop_token_ids!r}"
        )
    return tuple(int(i) for i in ids)


ACCEPTED = (
    "a string or a list of strings (with a preprocessor), a list of token "
    "ids, a list of token-id lists, or a (batch, seq) integer array"
)


def normalize_token_batch(name, inputs, vocabulary_size, padding_id, tokenize):
    """Turns generation inputs into a list of 1-D int64 arrays.

    Accepts a string or a list of strings (read by `tokenize(texts)`, a
    list of id arrays; None when the model has no preprocessor), a list of
    token ids (one sequence), a list of token-id lists of any lengths, or a
    dense (batch, seq) integer array whose `padding_id` entries are padding.
    Returns `(rows, kind)` with `kind` one of "string", "strings", "ids",
    "batch" (how to shape the output).
    """
    if inputs is None or isinstance(inputs, (bytes, dict, set, float, int)):
        raise ValueError(
            f"`{name}` must be {ACCEPTED}. Received: {name}={inputs!r:.80} "
            f"of type {type(inputs).__name__}"
        )
    if isinstance(inputs, str) or (
        isinstance(inputs, (list, tuple))
        and inputs
        and all(isinstance(x, str) for x in inputs)
    ):
        if tokenize is None:
            raise ValueError(
                f"`{name}` are strings but the model has no preprocessor (and "
                "so no tokenizer) to read them. Build it with `preprocessor=`, "
                f"or pass token ids instead. Received: {name}={str(inputs)[:80]}"
            )
        kind = "string" if isinstance(inputs, str) else "strings"
        texts = [inputs] if kind == "string" else list(inputs)
        rows = tokenize(texts)
        for i, (text, row) in enumerate(zip(texts, rows, strict=True)):
            if len(row) == 0:  # said as text: the ids ([]) would not say why
                where = name if kind == "string" else f"{name}[{i}]"
                raise ValueError(
                    f"`{name}` holds an empty prompt: {text!r} is no tokens, and "
                    "generation continues at least one; pass some text. "
                    f"Received: {where}={text!r:.40}"
                )
    elif isinstance(inputs, (list, tuple)) and all(
        isinstance(x, (int, np.integer)) and not isinstance(x, bool) for x in inputs
    ):
        kind, rows = "ids", [np.asarray(inputs)]
    elif isinstance(inputs, (list, tuple)):
        kind, rows = "batch", []
        for i, row in enumerate(inputs):
            if isinstance(row, (str, bytes)):
                raise ValueError(
                    f"`{name}` mixes strings and other items: it must be {ACCEPTED}. "
                    f"Received: {name}[{i}]={row!r:.40}"
                )
            row = np.asarray(row)
            if row.ndim != 1:
                raise ValueError(
                    f"Each item of `{name}` must be a list of token ids. Received: "
                    f"{name}[{i}] of shape {row.shape}"
                )
            rows.append(row)
    else:
        try:
            array = keras.ops.convert_to_numpy(inputs)
        except (TypeError, ValueError) as error:
            raise ValueError(
                f"`{name}` must be {ACCEPTED}. Received: {name}={inputs!r:.80} "
                f"of type {type(inputs).__name__}"
            ) from error
        if array.ndim not in (1, 2):
            raise ValueError(
                f"`{name}` must be {ACCEPTED}. Received: {name}.shape={array.shape}"
            )
        kind = "ids" if array.ndim == 1 else "batch"
        if array.ndim == 1:
            array = array[None]
        rows = [row[row != padding_id] for row in array]
    if not rows:
        raise ValueError(f"`{name}` is empty. Received: {name}={inputs!r}")
    for i, row in enumerate(rows):
        if row.size and not np.issubdtype(row.dtype, np.integer):
            raise ValueError(
                f"`{name}` must hold integer token ids. Received: "
                f"{name}[{i}] of dtype {row.dtype}"
            )
        if row.size == 0:
            raise ValueError(
                f"`{name}` holds an empty sequence: each needs at least one token. "
                f"Received: {name}[{i}]={row.tolist()}"
            )
        if row.min() < 0 or row.max() >= vocabulary_size:
            raise ValueError(
                f"`{name}` holds ids outside [0, {vocabulary_size}). "
                f"Received: {name}[{i}]={row.tolist()}"
            )
    return [row.astype("int64") for row in rows], kind


def pad_rows(rows, length, padding_id):
    """Right-pads rows into a (batch, length) int32 array and a bool mask."""
    tokens = np.full((len(rows), length), padding_id, "int32")
    mask = np.zeros((len(rows), length), bool)
    for i, row in enumerate(rows):
        tokens[i, : len(row)] = row
        mask[i, : len(row)] = True
    return tokens, mask


def truncate_at_stop(tokens, start, stop_token_ids):
    """`tokens` up to and including the first stop id at or after `start`."""
    tokens = [int(t) for t in tokens]
    if stop_token_ids:
        for i in range(start, len(tokens)):
            if tokens[i] in stop_token_ids:
                return tokens[: i + 1]
    return tokens


def truncated_lengths_graph(tokens, prompt_mask, stop_token_ids, lengths):
    """`truncate_at_stop` of a (batch, length) tensor, as row lengths:
    `lengths`, or less where a row has a stop id past its prompt (kept).

    Example:
    >>> tokens = np.array([[5, 2, 7, 2, 9]])
    >>> mask = np.array([[True, True, False, False, False]])
    >>> ops.convert_to_numpy(truncated_lengths_graph(tokens, mask, (2,), [5]))
    array([4], dtype=int32)
    """
    stops = ops.convert_to_tensor(stop_token_ids, "int32")
    is_stop = ops.any(ops.cast(tokens, "int32")[:, :, None] == stops, axis=-1)
    is_stop = ops.cast(ops.logical_and(is_stop, ops.logical_not(prompt_mask)), "int32")
    before = ops.cumsum(is_stop, axis=1) - is_stop  # stops strictly before
    kept = ops.sum(ops.cast(before == 0, "int32"), axis=1)
    return ops.minimum(ops.cast(lengths, "int32"), kept)


def format_outputs(rows, kind, tokenizer, stop_token_ids):
    """Outputs shaped like the inputs: strings back to strings.

    Strings are clean text: the stop ids are dropped, and
    `keras_tfm.data.detokenize` drops a WordPiece tokenizer's special tokens
    (`[START]`, `[END]`, `[PAD]`, ...) and rejoins its pieces and punctuation
    ("I've a dog.", not "I ' ve a dog .").
    """
    if kind in ("string", "strings"):
        stops = set(stop_token_ids or ())
        texts = [
            detokenize(tokenizer, [t for t in row if t not in stops]) for row in rows
        ]
        return texts[0] if kind == "string" else texts
    return rows[0] if kind == "ids" else rows

"""The settings of one generation request, and their per-row tensor form.

A `GenerationConfig` holds what a user sets per request (names as in HF's
`GenerationConfig` where it has them). The decoding loop does not see it:
it reads `settings_tensors(...)`, a dict of per-row tensors, so that a new
temperature, top-k, top-p or penalty is a new input value of the one
compiled loop, never a new program, and so that each row of a batch (each
slot of a server) can carry its own settings.

Off values: temperature 0 is greedy; top_k 0, top_p 1, min_p 0,
repetition_penalty 1, presence/frequency penalty 0 and
no_repeat_ngram_size 0 change nothing.

Example:
>>> config = GenerationConfig(sampler="top_p", top_p=0.9, seed=3)
>>> settings = settings_tensors([config, GenerationConfig()])
>>> settings["temperature"].tolist(), settings["top_k"].tolist()
([1.0, 0.0], [0, 0])
"""

import dataclasses
import math

import numpy as np

from keras_tfm.generation.buffers import buffer_length
from keras_tfm.validation import check_choice

SAMPLERS = ("greedy", "random", "top_k", "top_p", "beam")
"""The names `generate(sampler=...)` accepts."""

# The warpers each sampler reads (besides `seed`); any other is an error, so
# that e.g. `top_p=0.5` without `sampler="top_p"` does not run greedy. The
# logit processors (penalties, n-gram and word bans) apply to every sampler.
SAMPLER_SETTINGS = {
    "greedy": (),
    "random": ("temperature", "min_p"),
    "top_k": ("temperature", "top_k", "min_p"),
    "top_p": ("temperature", "top_p", "top_k", "min_p"),
    "beam": ("temperature", "num_beams", "length_penalty"),
}

MAX_NGRAM_SIZE = 8
"""The largest `no_repeat_ngram_size` (the loop compares n-grams unrolled)."""

_WARPERS = ("temperature", "top_k", "top_p", "min_p", "num_beams", "length_penalty")


def _number(name, value, low, high, low_open=False, integer=False):
    """`value` as a float (or int) in [low, high] (or (low, high]); ValueError."""
    kinds = (int, np.integer) if integer else (int, float, np.integer, np.floating)
    ok = isinstance(value, kinds) and not isinstance(value, bool)
    ok = ok and math.isfinite(value) and high >= value >= low
    ok = ok and not (low_open and value == low)
    if not ok:
        bracket = "(" if low_open else "["
        kind = "an integer" if integer else "a number"
        raise ValueError(
            f"`{name}` must be {kind} in {bracket}{low}, {high}]. "
            f"Received: {name}={value!r}"
        )
    return int(value) if integer else float(value)


def _check_bad_words(bad_words_ids):
    if bad_words_ids is None:
        return ()
    try:
        words = tuple(tuple(int(t) for t in word) for word in bad_words_ids)
        ok = all(
            word and all(t >= 0 for t in word) and not isinstance(w, (str, bytes))
            for word, w in zip(words, bad_words_ids, strict=True)
        )
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError(
            "`bad_words_ids` must be a list of non-empty lists of token ids, "
            f"e.g. [[5], [7, 8]]. Received: bad_words_ids={bad_words_ids!r:.80}"
        )
    return words


def _check_stop_strings(stop_strings):
    if stop_strings is None:
        return ()
    if isinstance(stop_strings, str):
        stop_strings = (stop_strings,)
    if not isinstance(stop_strings, (list, tuple)) or not all(
        isinstance(s, str) and s for s in stop_strings
    ):
        raise ValueError(
            "`stop_strings` must be a non-empty string or a list of them. "
            f"Received: stop_strings={stop_strings!r:.80}"
        )
    return tuple(stop_strings)


@dataclasses.dataclass(frozen=True)
class GenerationConfig:
    """What to sample and how to shape the logits, for one request.

    None means the default: the sampler's own (temperature 1, top_k 5 for
    "top_k", top_p 0.1 for "top_p") and no processor. A setting the chosen
    sampler does not read (`top_p` with "greedy", ...) is an error.

    Args:
        sampler: "greedy", "random", "top_k", "top_p" or "beam".
        temperature: divides the logits before sampling (> 0).
        top_k: sample among the k most likely tokens.
        top_p: sample among the most likely tokens whose probabilities sum
            to at least p (nucleus sampling), in (0, 1].
        min_p: drop tokens less likely than `min_p` times the most likely
            one (after temperature), in [0, 1].
        repetition_penalty: HF's: a logit of a token already in the prompt
            or the output is divided by it when positive, multiplied when
            negative (> 0; 1 is off).
        presence_penalty, frequency_penalty: OpenAI's: subtracted from a
            token's logit once if it was generated, and once per time it
            was generated (in [-2, 2]).
        no_repeat_ngram_size: no n-gram of this size occurs twice in the
            prompt plus the output (at most `MAX_NGRAM_SIZE`; 0 is off).
        bad_words_ids: token sequences never generated (the last token of
            each is banned after the others).
        seed: makes sampling repeatable; each row draws from its own seed
            and position, so a row samples alike alone or in a batch.
        num_beams, length_penalty: beam search (see `BeamSearchSampler`).
        stop_strings: generation of a row ends when its text ends with one
            of these (the string is not returned).

    Example:
    >>> GenerationConfig(sampler="greedy", top_p=0.5)
    Traceback (most recent call last):
    ...
    ValueError: `top_p` is not read by sampler='greedy', so it would be ignored. Choose a sampler that reads it (top_p), e.g. sampler='top_p'. Received: top_p=0.5
    """  # noqa: E501

    sampler: str = "greedy"
    temperature: float = None
    top_k: int = None
    top_p: float = None
    min_p: float = None
    repetition_penalty: float = None
    presence_penalty: float = None
    frequency_penalty: float = None
    no_repeat_ngram_size: int = None
    bad_words_ids: tuple = None
    seed: int = None
    num_beams: int = None
    length_penalty: float = None
    stop_strings: tuple = None

    def __post_init__(self):
        check = {
            "temperature": lambda v: _number("temperature", v, 0.0, 1e6, True),
            "top_k": lambda v: _number("top_k", v, 1, 2**31 - 1, integer=True),
            "top_p": lambda v: _number("top_p", v, 0.0, 1.0, True),
            "min_p": lambda v: _number("min_p", v, 0.0, 1.0),
            "repetition_penalty": lambda v: _number(
                "repetition_penalty", v, 0.0, 1e6, True
            ),
            "presence_penalty": lambda v: _number("presence_penalty", v, -2.0, 2.0),
            "frequency_penalty": lambda v: _number("frequency_penalty", v, -2.0, 2.0),
            "no_repeat_ngram_size": lambda v: _number(
                "no_repeat_ngram_size", v, 0, MAX_NGRAM_SIZE, integer=True
            ),
            "num_beams": lambda v: _number("num_beams", v, 1, 2**31 - 1, integer=True),
            "length_penalty": lambda v: _number("length_penalty", v, -1e6, 1e6),
            "seed": lambda v: _number("seed", v, -(2**63), 2**64 - 1, integer=True),
        }
        for name, checker in check.items():
            if getattr(self, name) is not None:
                object.__setattr__(self, name, checker(getattr(self, name)))
        object.__setattr__(self, "bad_words_ids", _check_bad_words(self.bad_words_ids))
        object.__setattr__(self, "stop_strings", _check_stop_strings(self.stop_strings))
        sampler = self.sampler
        if (self.num_beams or 1) > 1:
            if sampler not in ("greedy", "beam"):
                raise ValueError(
                    "`num_beams` > 1 means beam search, which does not sample. "
                    f"Received: num_beams={self.num_beams}, sampler={sampler!r}"
                )
            sampler = "beam"
        check_choice("sampler", sampler, SAMPLERS)
        object.__setattr__(self, "sampler", sampler)
        unread = [
            name
            for name in _WARPERS
            if getattr(self, name) is not None
            and name not in SAMPLER_SETTINGS[sampler]
            and not (name == "num_beams" and self.num_beams == 1)
        ]
        if unread:
            readers = sorted(
                s for s, names in SAMPLER_SETTINGS.items() if unread[0] in names
            )
            raise ValueError(
                f"`{unread[0]}` is not read by sampler={sampler!r}, so it would be "
                f"ignored. Choose a sampler that reads it ({', '.join(readers)}), "
                f"e.g. sampler={readers[-1]!r}. Received: "
                + ", ".join(f"{n}={getattr(self, n)!r}" for n in unread)
            )

    def replace(self, **changes):
        """A copy with `changes` (checked again)."""
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_dict(cls, values, source="values"):
        """A config from a dict of its fields (a preset's
        `generation_config.json`); an unknown name is a ValueError."""
        names = [field.name for field in dataclasses.fields(cls)]
        unknown = sorted(set(values) - set(names)) if isinstance(values, dict) else []
        if not isinstance(values, dict) or unknown:
            raise ValueError(
                f"{source} must be a dict of GenerationConfig fields ({names}). "
                f"Received: {unknown or type(values).__name__}"
            )
        return cls(**values)

    def row_values(self):
        """The per-row numbers the loop reads, defaults filled in."""
        sampler = self.sampler
        temperature = 1.0 if self.temperature is None else self.temperature
        top_k = self.top_k or 0
        if sampler == "top_k" and self.top_k is None:
            top_k = 5
        top_p = self.top_p if self.top_p is not None else 1.0
        if sampler == "top_p" and self.top_p is None:
            top_p = 0.1
        return {
            "temperature": 0.0 if sampler == "greedy" else temperature,
            "top_k": top_k,
            "top_p": top_p,
            "min_p": self.min_p or 0.0,
            "repetition_penalty": self.repetition_penalty or 1.0,
            "presence_penalty": self.presence_penalty or 0.0,
            "frequency_penalty": self.frequency_penalty or 0.0,
            "no_repeat_ngram_size": self.no_repeat_ngram_size or 0,
        }

    @property
    def uses_processors(self):
        """Whether any logit processor is on."""
        values = self.row_values()
        return bool(
            values["repetition_penalty"] != 1.0
            or values["presence_penalty"]
            or values["frequency_penalty"]
            or values["no_repeat_ngram_size"]
            or self.bad_words_ids
        )


SETTINGS_DTYPES = {
    "temperature": "float32",
    "top_k": "int32",
    "top_p": "float32",
    "min_p": "float32",
    "repetition_penalty": "float32",
    "presence_penalty": "float32",
    "frequency_penalty": "float32",
    "no_repeat_ngram_size": "int32",
    "seed": "int32",
}
"""The (batch,) entries of the settings dict and their dtypes."""


def seed_word(seed):
    """A seed folded into an int32 (its 32-bit hash), for the loop's tensors."""
    seed = int(seed)
    word = (seed ^ (seed >> 32) ^ (seed >> 64)) & 0xFFFFFFFF
    return np.array(word, "uint32").view("int32").item()


def settings_tensors(configs, stop_token_ids=None, rng=None):
    """The loop's per-row settings, from one `GenerationConfig` per row.

    Returns a dict of NumPy arrays: each entry of `SETTINGS_DTYPES` of shape
    (batch,), "bad_words" int32 (batch, words, length) right-aligned and
    padded with -1 (the last column is the banned token), and
    "stop_token_ids" int32 (batch, n) padded with -1. The padded sizes are
    at least 4 words of 4 tokens and 8 stop ids, rounded up to powers of
    two, so that few shapes reach the compiled loop.
    A row without a seed gets a random one (from `rng`, a NumPy Generator).

    Args:
        configs: a list of `GenerationConfig`, one per row.
        stop_token_ids: None, a tuple of ids for every row, or a list of
            tuples (one per row).
        rng: where unseeded rows draw their seeds (default: fresh entropy).
    """
    rng = np.random.default_rng() if rng is None else rng
    batch = len(configs)
    values = [config.row_values() for config in configs]
    settings = {
        name: np.array([v[name] for v in values], dtype)
        for name, dtype in SETTINGS_DTYPES.items()
        if name != "seed"
    }
    settings["seed"] = np.array(
        [
            seed_word(c.seed if c.seed is not None else rng.integers(2**32))
            for c in configs
        ],
        "int32",
    )
    words = [c.bad_words_ids for c in configs]
    count = buffer_length(max(len(w) for w in words), smallest=4)
    length = buffer_length(
        max((len(x) for w in words for x in w), default=1), smallest=4
    )
    bad = np.full((batch, count, length), -1, "int32")
    for i, row in enumerate(words):
        for j, word in enumerate(row):
            bad[i, j, length - len(word) :] = word
    settings["bad_words"] = bad
    if stop_token_ids is None or isinstance(stop_token_ids, tuple):
        stop_token_ids = [stop_token_ids or ()] * batch
    stops = np.full(
        (batch, buffer_length(max(map(len, stop_token_ids)), smallest=8)), -1, "int32"
    )
    for i, ids in enumerate(stop_token_ids):
        stops[i, : len(ids)] = ids
    settings["stop_token_ids"] = stops
    return settings


def request_base(default, sampler, num_beams, draft):
    """What a request starts from: a model's default config (a preset's
    settings, `CausalLM.generation_config`) under the caller's choices.

    The caller's choice of decoding (a `sampler`, `num_beams` > 1) replaces
    the default's sampler and warpers and keeps its processors; speculative
    decoding (`draft`) and a sampler object take none of it.

    Example:
    >>> default = GenerationConfig(sampler="top_p", top_p=0.9,
    ...                            repetition_penalty=1.1)
    >>> request_base(default, "greedy", None, None)
    GenerationConfig(sampler='greedy', temperature=None, top_k=None, top_p=None, min_p=None, repetition_penalty=1.1, presence_penalty=None, frequency_penalty=None, no_repeat_ngram_size=None, bad_words_ids=(), seed=None, num_beams=None, length_penalty=None, stop_strings=())
    """  # noqa: E501
    if default is None or draft is not None or not isinstance(sampler, str | None):
        return None
    if sampler is not None or (num_beams or 1) > 1:
        return default.replace(sampler="greedy", **dict.fromkeys(_WARPERS))
    return default


def single_config(default, sampler, settings):
    """The `GenerationConfig` of one request: `settings` (setting: value)
    and `sampler` (a name, or None for `default`'s) over a model's `default`
    config, by `request_base` and `configs_for`'s rules; a ValueError for
    what `generate` refuses.

    Example:
    >>> single_config(GenerationConfig(sampler="top_p", top_p=0.9), None,
    ...               {"seed": 3}).top_p
    0.9
    """
    base = request_base(default, sampler, settings.get("num_beams"), None)
    (config,), _ = configs_for(sampler, settings, base, 1)
    return config


def _is_sampler_object(sampler):
    """Whether `sampler` is a `keras_hub.samplers.Sampler` (keras_hub, which
    imports Keras, is imported only for what is not a name: the LiteRT chat
    resolves its settings here without Keras)."""
    if isinstance(sampler, str | None):
        return False
    import keras_hub

    return isinstance(sampler, keras_hub.samplers.Sampler)


def configs_for(sampler, settings, generation_config, batch_size):
    """`(configs, instance)` for `generate`'s arguments.

    `configs` holds one `GenerationConfig` per row: `generation_config` (one,
    or a list with one per row; None: the defaults) with the non-None
    `settings` and `sampler` put over it. A `sampler` given by name drops
    the base's warpers it does not read (a preset's top_p does not make
    `sampler="greedy"` an error). `instance` is a `keras_hub.samplers.Sampler`
    object passed as `sampler` (which then takes only `seed`), else None.
    """
    given = {name: value for name, value in settings.items() if value is not None}
    if _is_sampler_object(sampler):
        if given.get("num_beams") is not None:
            _number("num_beams", given["num_beams"], 1, 2**31 - 1, integer=True)
            if given["num_beams"] == 1:
                del given["num_beams"]
        unread = [f"{n}={given[n]!r}" for n in sorted(given) if n != "seed"]
        if generation_config is not None:
            unread.append(f"generation_config={generation_config!r:.60}")
        if unread:
            raise ValueError(
                "A `keras_hub.samplers.Sampler` object carries its own settings "
                "and takes no processor: pass a sampler name (e.g. 'top_p') to "
                "use them. Received: " + ", ".join(unread)
            )
        return [GenerationConfig(seed=given.get("seed"))] * batch_size, sampler
    bases = generation_config
    if bases is None or isinstance(bases, GenerationConfig):
        bases = [bases or GenerationConfig()] * batch_size
    if (
        not isinstance(bases, (list, tuple))
        or len(bases) != batch_size
        or not all(isinstance(b, GenerationConfig) for b in bases)
    ):
        raise ValueError(
            "`generation_config` must be a GenerationConfig or a list of one "
            f"per input ({batch_size}). Received: "
            f"generation_config={generation_config!r:.80}"
        )
    configs = []
    for base in bases:
        if sampler is not None:
            name = sampler if sampler in SAMPLERS else None
            check_choice("sampler", sampler, SAMPLERS)
            if (given.get("num_beams") or 1) > 1:
                name = "beam"
            dropped = {
                n: None
                for n in _WARPERS
                if n not in SAMPLER_SETTINGS[name] and n not in given
            }
            base = dataclasses.replace(base, sampler=sampler, **dropped)
        configs.append(dataclasses.replace(base, **given))
    if len({c.sampler == "beam" for c in configs}) > 1 or (
        configs[0].sampler == "beam" and len(set(configs)) > 1
    ):
        raise ValueError(
            "Beam search takes one setting for the whole batch. Received: "
            f"samplers {[c.sampler for c in configs]}"
        )
    return configs, None

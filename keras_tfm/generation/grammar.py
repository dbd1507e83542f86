"""Structured output: a token automaton built from a regex or a JSON schema.

`response_format` (OpenAI's form, plus a regex) becomes a regular
expression (outlines-core's `build_regex_from_schema` for a JSON schema),
outlines-core's `Index` walks it over the tokenizer's vocabulary, and
`TokenAutomaton` lays the result out as dense tables a compiled loop
reads (`strategies.constrained`):

    next_state[s, token_class[t]]   the state after token t in state s,
                                     -1 where t is not allowed in s

State 0 is the initial state. A stop token is allowed only in final
states (where the text is complete) and keeps the state. Tokens that act
alike in every state share a class (the columns of the (states, V) table
are deduplicated): outlines-core's JSON object over SmolLM2's 49,152
tokens has 1,623 states but 138 classes, so its table holds 1,623 x 138
entries, not 80 million. Special tokens other than the stop tokens are never allowed.

Example:
>>> import keras_hub
>>> tokenizer = keras_hub.tokenizers.ByteTokenizer()
>>> automaton = cached_automaton(tokenizer, 256, "ab|ac", (0,))
>>> allowed = lambda s: [chr(t) if t else "<stop>" for t in automaton.allowed(s)]
>>> allowed(0), allowed(automaton.step(0, ord("a")))
(['a'], ['b', 'c'])
>>> allowed(automaton.step(automaton.step(0, ord("a")), ord("c")))
['<stop>']
"""

import collections
import dataclasses
import json
import threading
import weakref

import numpy as np

from keras_tfm.generation.buffers import buffer_length
from keras_tfm.generation.stop_strings import token_bytes

FORMAT_TYPES = ("text", "json_object", "json_schema", "regex")
"""The `type`s of a `response_format`."""

_SCALARS = [{"type": t} for t in ("string", "number", "boolean", "null")]
JSON_OBJECT_SCHEMA = {
    "type": "object",
    "additionalProperties": {"anyOf": _SCALARS + [
        {"type": "array", "items": {"anyOf": _SCALARS}},
        {"type": "object", "additionalProperties": {"anyOf": _SCALARS}},
    ]},
}  # fmt: skip
"""What `{"type": "json_object"}` asks for: a JSON object whose values are
scalars, arrays of scalars or objects of scalars (two levels): 399
states, built in 3-5 s over SmolLM2's vocabulary; outlines-core's
`{"type": "object"}` nests three levels, 1,623 states that took 15-17 s
(2-core Xeon)."""

# The JSON-schema keywords outlines-core's regex honours, the ones that only
# annotate (accepted, nothing to honour), and where subschemas sit.
HONOURED = {
    "type", "properties", "required", "items", "prefixItems", "minItems",
    "maxItems", "minLength", "maxLength", "pattern", "format", "enum", "const",
    "anyOf", "oneOf", "allOf", "$ref", "$defs", "definitions",
    "additionalProperties",
}  # fmt: skip
ANNOTATIONS = {
    "title", "description", "default", "examples", "$schema", "$id",
    "$comment", "deprecated", "readOnly", "writeOnly",
}  # fmt: skip
_SCHEMA_MAPS = ("properties", "$defs", "definitions")
_SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")

TABLE_SMALLEST = (64, 256)
"""The smallest padded (states, classes) of a table: a schema of a few
fields (51 states and 85 classes over SmolLM2's tokens) and most others of
their size share one compiled loop (64 KB of table)."""

CACHE_SIZE = 32
"""How many automata each tokenizer keeps (least recently used dropped)."""


def _outlines():
    try:
        import outlines_core
        from outlines_core.json_schema import build_regex_from_schema
    except ImportError as error:
        raise ImportError(
            "Structured output (`response_format`) builds its automaton with "
            f"outlines-core, which cannot be imported here ({error}). Install "
            "it: `pip install outlines-core` (or keras-tfm's `serve` extra)."
        ) from error
    return outlines_core, build_regex_from_schema


def check_schema_keywords(schema, where="schema"):
    """ValueError naming the first keyword of `schema` (or a subschema) that
    the automaton would not honour (outlines-core ignores some silently:
    `minimum`, `uniqueItems`, `not`...)."""
    if isinstance(schema, bool):
        return
    if not isinstance(schema, dict):
        raise ValueError(
            f"A JSON schema must be an object. Received: {where}={schema!r:.80}"
        )
    for key, value in schema.items():
        if key not in HONOURED and key not in ANNOTATIONS:
            raise ValueError(
                f"The JSON-schema keyword {key!r} is not supported by structured "
                f"output (supported: {', '.join(sorted(HONOURED))}). Received: "
                f"{where}.{key}={value!r:.60}"
            )
        if key == "additionalProperties" and not (
            (value is False and "properties" in schema)
            or (isinstance(value, dict) and "properties" not in schema)
        ):
            raise ValueError(
                "`additionalProperties` is supported as false beside "
                "`properties` (only the listed properties are written) or as "
                "a schema without `properties` (a map). Received: "
                f"{where}.additionalProperties={value!r:.60}"
            )
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            for name, sub in value.items():
                check_schema_keywords(sub, f"{where}.{key}.{name}")
        elif key in _SCHEMA_LISTS and isinstance(value, list):
            for i, sub in enumerate(value):
                check_schema_keywords(sub, f"{where}.{key}[{i}]")
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            check_schema_keywords(value, f"{where}.{key}")


def schema_regex(schema):
    """The regex of JSON `schema` (a dict or a JSON string): outlines-core's,
    after `check_schema_keywords`; ValueError for a schema it refuses."""
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except ValueError as error:
            raise ValueError(
                f"The JSON schema is not valid JSON ({error}). Received: {schema!r:.80}"
            ) from None
    check_schema_keywords(schema)
    _, build_regex_from_schema = _outlines()
    try:
        return build_regex_from_schema(json.dumps(schema))
    except Exception as error:  # outlines-core's errors (Rust panics too)
        raise ValueError(
            f"The JSON schema cannot be turned into a grammar: "
            f"{str(error).splitlines()[0]}. Received: schema={schema!r:.80}"
        ) from None


def response_format_regex(response_format):
    """The regex a `response_format` constrains the answer to, or None.

    Args:
        response_format: None or `{"type": "text"}` (no constraint);
            `{"type": "json_object"}` (any JSON object);
            `{"type": "json_schema", "json_schema": {"schema": {...}}}`
            (OpenAI's; `name` and `strict` are accepted and not needed);
            `{"type": "regex", "regex": "..."}` (the text matches it whole).

    Returns:
        The regex (str), or None.

    Example:
    >>> response_format_regex({"type": "regex", "regex": "yes|no"})
    'yes|no'
    >>> response_format_regex({"type": "json"})
    Traceback (most recent call last):
    ...
    ValueError: `response_format` must be an object whose "type" is one of 'text', 'json_object', 'json_schema', 'regex'. Received: response_format={'type': 'json'}
    """  # noqa: E501
    if response_format is None:
        return None
    kind = response_format.get("type") if isinstance(response_format, dict) else None
    if kind not in FORMAT_TYPES:
        raise ValueError(
            '`response_format` must be an object whose "type" is one of '
            f"{', '.join(map(repr, FORMAT_TYPES))}. Received: "
            f"response_format={response_format!r:.100}"
        )
    if kind == "text":
        return None
    if kind == "json_object":
        return schema_regex(JSON_OBJECT_SCHEMA)
    if kind == "regex":
        regex = response_format.get("regex")
        if not isinstance(regex, str) or not regex:
            raise ValueError(
                '`response_format` {"type": "regex"} needs "regex", a non-empty '
                f"string. Received: response_format={response_format!r:.100}"
            )
        return regex
    spec = response_format.get("json_schema")
    if not isinstance(spec, dict) or "schema" not in spec:
        raise ValueError(
            '`response_format` {"type": "json_schema"} needs "json_schema": '
            '{"name": ..., "schema": {...}}. Received: '
            f"response_format={response_format!r:.100}"
        )
    return schema_regex(spec["schema"])


@dataclasses.dataclass(frozen=True)
class TokenAutomaton:
    """The dense tables of a regex over a vocabulary (module docstring).

    Attributes:
        next_state: int32 (states, classes), -1 where not allowed; both
            sizes padded with -1 to powers of two of at least
            `TABLE_SMALLEST` (each shape is a compiled program).
        token_class: int32 (V,), each token's column.
        final: bool (states,), whether the text may end there.
        num_states: the states before padding.
    """

    next_state: np.ndarray
    token_class: np.ndarray
    final: np.ndarray
    num_states: int

    def allowed(self, state):
        """The token ids allowed in `state` (ascending)."""
        return np.flatnonzero(self.mask(state)).tolist()

    def mask(self, state):
        """bool (V,): whether each token is allowed in `state`."""
        return self.next_state[state, self.token_class] >= 0

    def step(self, state, token):
        """The state after `token` in `state` (-1: not allowed)."""
        return int(self.next_state[state, self.token_class[token]])


def special_token_ids(tokenizer, pieces):
    """The ids of the tokenizer's special tokens (never text)."""
    ids = set(int(i) for i in getattr(tokenizer, "special_token_ids", None) or ())
    special = set(getattr(tokenizer, "unsplittable_tokens", None) or ())
    if special and hasattr(tokenizer, "get_vocabulary"):
        vocabulary = list(tokenizer.get_vocabulary())[: len(pieces)]
        ids |= {i for i, piece in enumerate(vocabulary) if piece in special}
    return ids


def build_automaton(regex, pieces, stop_token_ids, excluded=()):
    """The `TokenAutomaton` of `regex` over tokens whose texts are `pieces`.

    Args:
        regex: the regular expression the whole text must match.
        pieces: each token id's UTF-8 bytes (`stop_strings.token_bytes`).
        stop_token_ids: the ids that end a row (at least one): allowed in
            final states only.
        excluded: ids never allowed (special tokens); tokens without bytes
            are never allowed either.

    Returns:
        A `TokenAutomaton`.
    """
    outlines_core, _ = _outlines()
    if not stop_token_ids:
        raise ValueError(
            "Structured output ends a row with a stop token, allowed once the "
            "text is complete: it needs stop_token_ids (the preprocessor's end "
            f"token by default). Received: stop_token_ids={stop_token_ids!r}"
        )
    eos = int(stop_token_ids[0])
    never = set(excluded) | {int(t) for t in stop_token_ids}
    vocabulary = collections.defaultdict(list)
    for i, piece in enumerate(pieces):
        if piece and i not in never:
            vocabulary[bytes(piece)].append(i)
    try:
        index = outlines_core.Index(
            regex, outlines_core.Vocabulary(eos, dict(vocabulary))
        )
    except Exception as error:  # outlines-core's errors (Rust panics too)
        reason = str(error).splitlines()[0]
        reason = reason if len(reason) < 400 else reason[:397] + "..."
        raise ValueError(
            "No token automaton for this format over the tokenizer's "
            f"vocabulary: {reason} Received: regex={regex!r:.80}"
        ) from None
    transitions = index.get_transitions()
    initial = index.get_initial_state()
    finals = set(index.get_final_states())
    reached = {s for edges in transitions.values() for s in edges.values()}
    states = [initial] + sorted((set(transitions) | finals | reached) - {initial})
    number = {s: i for i, s in enumerate(states)}
    # (V, states): a token's row is its column of the transition table, so
    # identical rows are one class.
    by_token = np.full((len(pieces), len(states)), -1, "int32")
    for state, edges in transitions.items():
        ids = np.fromiter(edges.keys(), "int64", len(edges))
        to = np.fromiter((number[s] for s in edges.values()), "int64", len(edges))
        by_token[ids, number[state]] = to
    by_token[list(stop_token_ids)] = by_token[eos]
    rows = np.ascontiguousarray(by_token).view(
        np.dtype((np.void, by_token.dtype.itemsize * len(states)))
    )[:, 0]
    _, first, token_class = np.unique(rows, return_index=True, return_inverse=True)
    columns = by_token[first].T  # (states, classes)
    shape = [
        buffer_length(n, smallest=smallest)
        for n, smallest in zip(columns.shape, TABLE_SMALLEST, strict=True)
    ]
    padded = np.full(shape, -1, "int32")
    padded[: columns.shape[0], : columns.shape[1]] = columns
    final = np.zeros((padded.shape[0],), bool)
    final[[number[s] for s in finals]] = True
    return TokenAutomaton(
        padded, token_class.astype("int32").reshape(-1), final, len(states)
    )


_CACHE = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def cached_automaton(tokenizer, vocabulary_size, regex, stop_token_ids):
    """`build_automaton` over `tokenizer`'s tokens, kept per tokenizer (the
    `CACHE_SIZE` most recently used per tokenizer)."""
    key = (regex, vocabulary_size, tuple(int(t) for t in stop_token_ids or ()))
    with _LOCK:
        automata = _CACHE.setdefault(tokenizer, collections.OrderedDict())
        if key in automata:
            automata.move_to_end(key)
            return automata[key]
    pieces = token_bytes(tokenizer, vocabulary_size)
    automaton = build_automaton(
        regex, pieces, key[2], special_token_ids(tokenizer, pieces)
    )
    with _LOCK:
        automata[key] = automaton
        while len(automata) > CACHE_SIZE:
            automata.popitem(last=False)
    return automaton

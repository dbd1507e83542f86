"""Structured output: a random tiny model whose every answer must match.

The model's weights are random (its logits prefer nothing in particular),
its byte-level BPE vocabulary holds JSON's punctuation, words and
multi-character pieces that cross JSON's boundaries (`":`, `",`, `}}`).
Every answer must parse and validate, and greedy constrained decoding
must equal a plain Python loop over full forward passes that masks the
logits with outlines-core's own `Index` (the reference does not read
`grammar.TokenAutomaton`'s tables).
"""

import json
import re
import warnings

import keras
import numpy as np
import outlines_core
import pytest

from keras_tfm.generation import grammar
from keras_tfm.generation.outputs import TruncatedAnswerWarning
from keras_tfm.generation.request import GenerationRequest
from keras_tfm.generation.strategies import constrained, strategy_for
from keras_tfm.tokenizers.byte_level_bpe_tokenizer import ByteLevelBPETokenizer
from tests.builders import causal_lm, graph_forward

PIECES = [
    "<|endoftext|>", "<|pad|>", "{", "}", '"', ":", ",", "Ġ", "[", "]", "a", "b",
    "n", "e", "m", "1", "2", "0", "-", "t", "r", "u", "f", "l", "s", "x", "k",
    "i", "d", "g", "o", "y", "3",
    "name", '"name"', 'Ġ"', '":', '",', "}}", "ab", "true", "false", "null",
    '["', '"]', "Ġ{", "12", "ok", "tags", "Ã©", "<|im_start|>",
]  # fmt: skip
END, SPECIAL = 0, PIECES.index("<|im_start|>")
V = len(PIECES)

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 5},
        "n": {"type": "string", "pattern": "[0-9]{1,3}"},
        "tags": {"type": "array", "items": {"enum": ["a", "b", "ab"]}, "maxItems": 3},
        "ok": {"type": "boolean"},
        "kind": {"anyOf": [{"type": "null"}, {"const": "x"}]},
    },
    "required": ["name", "n", "ok"],
}  # every string, array and number is bounded: every row must end


@pytest.fixture(scope="module")
def tokenizer():
    return ByteLevelBPETokenizer(
        {p: i for i, p in enumerate(PIECES)}, ["a b"], pre_tokenizer="gpt2",
        unsplittable_tokens=["<|endoftext|>", "<|im_start|>"],
        eos_token="<|endoftext|>",
    )  # fmt: skip


@pytest.fixture(scope="module")
def model(tokenizer):
    keras.utils.set_random_seed(3)
    model = causal_lm(
        vocabulary_size=V, num_layers=1, num_heads=2, hidden_dim=16,
        intermediate_dim=32, max_sequence_length=256,
        position_encoding="rotary", tokenizer=tokenizer,
    )  # fmt: skip
    # Larger logits than the initializer's: the random preferences are sharp.
    embedding = model.backbone.token_embedding.embeddings
    embedding.assign(embedding.numpy() * 8)
    return model


def text_of(tokenizer, ids):
    return tokenizer.detokenize([i for i in ids if i != END])


def check_valid(text, schema=SCHEMA):
    """`text` is a JSON document valid under `schema` (jsonschema's check
    when installed, else each field by hand)."""
    value = json.loads(text)
    try:
        import jsonschema
    except ImportError:
        jsonschema = None
    if jsonschema is not None:
        jsonschema.validate(value, schema)
        return value
    assert set(value) >= {"name", "n", "ok"} and set(value) <= set(schema["properties"])
    assert isinstance(value["name"], str) and len(value["name"]) <= 5
    assert re.fullmatch("[0-9]{1,3}", value["n"]) and isinstance(value["ok"], bool)
    assert value.get("kind", None) in (None, "x")
    tags = value.get("tags", [])
    assert len(tags) <= 3 and all(t in ("a", "b", "ab") for t in tags)
    return value


def schema_format(schema=SCHEMA):
    return {"type": "json_schema", "json_schema": {"name": "t", "schema": schema}}


PROMPTS = [[2], [4, 10, 11], [7, 7, 26, 5, 15, 3, 12]]  # ragged


def test_the_request_runs_on_the_constrained_strategy(model):
    request = GenerationRequest.build(
        model, [[2]], 8, response_format={"type": "json_object"}
    )
    assert strategy_for(request, model) is constrained
    assert request.stop_token_ids == (END,)


@pytest.mark.parametrize("settings", [
    dict(),
    dict(sampler="random", temperature=1.0, seed=5),
    dict(sampler="top_p", temperature=0.7, top_p=0.9, seed=11),
    dict(sampler="random", temperature=1.5, seed=2, repetition_penalty=1.3),
])  # fmt: skip
def test_every_answer_validates(model, tokenizer, settings):
    outputs = model.generate(
        PROMPTS, max_new_tokens=120, response_format=schema_format(), **settings
    )
    for prompt, row in zip(PROMPTS, outputs, strict=True):
        new = row[len(prompt) :]
        assert new[-1] == END, "a bounded schema ends within the budget"
        assert END not in new[:-1] and SPECIAL not in new
        check_valid(text_of(tokenizer, new))


def test_seeds_give_different_valid_answers(model, tokenizer):
    texts = set()
    for seed in range(6):
        row = model.generate(
            [2], max_new_tokens=120, response_format=schema_format(),
            sampler="random", temperature=1.0, seed=seed,
        )  # fmt: skip
        texts.add(text_of(tokenizer, row[1:]))
        check_valid(text_of(tokenizer, row[1:]))
    assert len(texts) > 1  # the mask leaves the sampler a choice


def reference_greedy(model, tokenizer, prompt, regex, max_new_tokens):
    """Full forward passes, the logits masked with outlines-core's `Index`
    allowed tokens at each step, the argmax: a plain loop."""
    pieces = {}
    vocabulary = tokenizer.get_vocabulary()
    from keras_hub.src.tokenizers.byte_pair_tokenizer import bytes_to_unicode

    byte_list, unicode_list = bytes_to_unicode()
    decode = dict(zip(unicode_list, byte_list, strict=True))
    for i, piece in enumerate(vocabulary):
        if i not in (END, SPECIAL):
            pieces.setdefault(b"".join(decode[c] for c in piece), []).append(i)
    index = outlines_core.Index(regex, outlines_core.Vocabulary(END, pieces))
    state, ids = index.get_initial_state(), list(prompt)
    forward = graph_forward(model)
    for _ in range(max_new_tokens):
        logits = np.asarray(forward(np.array([ids]))[0, -1], "float64")
        allowed = np.asarray(index.get_allowed_tokens(state))
        token = int(allowed[np.argmax(logits[allowed])])
        ids.append(token)
        if token == END:
            break
        state = index.get_next_state(state, token)
    return ids


@pytest.mark.parametrize("response_format", [
    schema_format(),
    {"type": "json_object"},
    {"type": "regex", "regex": "(ab|a)+(-[0-9]{2})?"},
])  # fmt: skip
def test_greedy_equals_a_masked_full_pass_reference(model, tokenizer, response_format):
    regex = grammar.response_format_regex(response_format)
    outputs = model.generate(
        PROMPTS, max_new_tokens=40, response_format=response_format
    )
    for prompt, row in zip(PROMPTS, outputs, strict=True):
        assert row == reference_greedy(model, tokenizer, prompt, regex, 40)


def test_a_regex_answer_matches_whole(model, tokenizer):
    regex = "(yes|no|maybe)-[0-9]{1,2}"
    for seed in range(4):
        row = model.generate(
            [4], max_new_tokens=16, response_format={"type": "regex", "regex": regex},
            sampler="random", seed=seed,
        )  # fmt: skip
        assert row[-1] == END
        assert re.fullmatch(regex, text_of(tokenizer, row[1:]))


def test_the_tables_agree_with_outlines_index(tokenizer):
    regex = grammar.response_format_regex(schema_format())
    automaton = grammar.cached_automaton(tokenizer, V, regex, (END,))
    pieces = grammar.token_bytes(tokenizer, V)
    vocabulary = {}
    for i, piece in enumerate(pieces):
        if i not in (END, SPECIAL) and piece:
            vocabulary.setdefault(piece, []).append(i)
    index = outlines_core.Index(regex, outlines_core.Vocabulary(END, vocabulary))
    # Walk both from the start along random allowed tokens.
    rng = np.random.default_rng(0)
    for _ in range(20):
        state, ours = index.get_initial_state(), 0
        for _ in range(60):
            allowed = sorted(index.get_allowed_tokens(state))
            assert automaton.allowed(ours) == allowed
            assert bool(automaton.final[ours]) == index.is_final_state(state)
            token = int(rng.choice(allowed))
            if token == END:
                break
            state, ours = (
                index.get_next_state(state, token),
                automaton.step(ours, token),
            )
    assert len(set(automaton.token_class.tolist())) < V  # tokens share classes


def test_several_stop_ids_are_each_allowed_at_the_end_only(tokenizer):
    automaton = grammar.cached_automaton(tokenizer, V, "ab", (END, 3))
    state = automaton.step(automaton.step(0, 10), 11)
    assert automaton.allowed(state) == [END, 3]
    assert automaton.allowed(0) == [PIECES.index("a"), PIECES.index("ab")]
    assert automaton.step(state, 3) == state


@pytest.mark.parametrize("settings, match", [
    (dict(response_format={"type": "json_object"}, num_beams=2), "beam search"),
    (dict(response_format={"type": "json_object"}, stream=True), "streaming"),
    (dict(response_format={"type": "json_object"}, draft="prompt_lookup"), "draft"),
    (dict(response_format={"type": "json_object"}, return_scores=True), "scores"),
    (dict(response_format={"type": "json_object"}, stop_token_ids=[]), "stop token"),
    (dict(response_format={"type": "xml"}), "'json_object'"),
    (dict(response_format={"type": "json_schema"}), '"json_schema"'),
    (dict(response_format={"type": "regex", "regex": ""}), "non-empty"),
    (dict(response_format=schema_format({"type": "integer", "minimum": 3})),
     "'minimum'"),
    (dict(response_format=schema_format(
        {"type": "object", "properties": {"a": {"type": "array", "uniqueItems": True}}}
    )), r"schema\.properties\.a\.uniqueItems"),
    (dict(response_format=schema_format({"type": "objecto"})), "objecto"),
    (dict(response_format=schema_format("{nope")), "not valid JSON"),
])  # fmt: skip
def test_refusals_name_the_problem(model, settings, match):
    stream = settings.pop("stream", False)
    with pytest.raises(ValueError, match=match):
        GenerationRequest.build(model, [[2]], 8, stream=stream, **settings)


def test_an_unsatisfiable_regex_is_a_clear_error(model):
    # No token holds "z": the automaton has no way out of its start.
    with pytest.raises(ValueError, match="automaton"):
        model.generate([2], max_new_tokens=4,
                       response_format={"type": "regex", "regex": "zz"})  # fmt: skip


def test_without_a_tokenizer_it_is_refused():
    bare = causal_lm(
        vocabulary_size=8, num_layers=1, num_heads=1, hidden_dim=4,
        intermediate_dim=8, max_sequence_length=8,
    )  # fmt: skip
    with pytest.raises(ValueError, match="tokenizer"):
        bare.generate([1], max_new_tokens=2, response_format={"type": "json_object"})


def test_strings_in_strings_out(model):
    text = model.generate("a", max_new_tokens=120, response_format=schema_format())
    check_valid(text[len("a") :])


def test_json_object_answers_are_objects(model, tokenizer):
    ended = 0
    for seed in range(6):
        row = model.generate(
            [2], max_new_tokens=120, response_format={"type": "json_object"},
            sampler="random", seed=seed,
        )  # fmt: skip
        if row[-1] == END:  # else cut by max_new_tokens
            ended += 1
            assert isinstance(json.loads(text_of(tokenizer, row[1:])), dict)
    assert ended >= 3


def test_a_text_answer_cut_by_max_new_tokens_says_so(model, tokenizer):
    # Text hides the stop token, so a cut answer warns, naming the budget;
    # ids show it (no warning: the server reads its finish reason from them).
    json_object = {"type": "json_object"}
    with pytest.warns(TruncatedAnswerWarning, match=r"2 of 2 .*max_new_tokens=3"):
        texts = model.generate(["a", "b"], max_new_tokens=3,
                               response_format=json_object)  # fmt: skip
    with pytest.raises(json.JSONDecodeError):
        json.loads(texts[0][1:])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model.generate([[2]], max_new_tokens=3, response_format=json_object)
        text = model.generate("a", max_new_tokens=120, response_format=schema_format())
    check_valid(text[1:])  # it ended: nothing said


@pytest.mark.parametrize("fields, match", [
    (dict(decoder_only=False, model_name="Seq2SeqLM"), "Seq2SeqLM"),
    (dict(slides=True), "sliding window=True"),
    (dict(instance=object(), sampler="a sampler object"), "a sampler object"),
])  # fmt: skip
def test_validate_refuses_the_other_loops(fields, match):
    from keras_tfm.generation import GenerationConfig

    request = GenerationRequest(
        [GenerationConfig()], 4, stop_token_ids=(0,), regex="a", **fields
    )
    with pytest.raises(ValueError, match=match):
        request.validate()


def test_formats_of_one_padded_size_share_one_program(tokenizer):
    model = causal_lm(
        vocabulary_size=V, num_layers=1, num_heads=2, hidden_dim=8,
        intermediate_dim=16, max_sequence_length=32, tokenizer=tokenizer,
    )  # fmt: skip
    formats = [
        {"type": "regex", "regex": "(yes|no)"},
        {"type": "regex", "regex": "[0-9]{1,3}"},
        schema_format({"type": "object", "properties": {"ok": {"type": "boolean"}}}),
    ]
    for response_format in formats:
        model.generate([[4, 10]], max_new_tokens=8, response_format=response_format)
    function = model.compiled_loops.get(("constrained",), None)
    assert function.experimental_get_tracing_count() == 1

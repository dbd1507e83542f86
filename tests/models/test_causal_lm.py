import keras
import keras_hub
import numpy as np
import pytest

from keras_tfm.models import CausalLM
from tests.builders import causal_lm
from tests.models.injected import WIDTH, inject, successor

VOCAB = 12


def tiny(**kwargs):
    config = dict(
        vocabulary_size=VOCAB,
        num_layers=1,
        num_heads=2,
        hidden_dim=16,
        intermediate_dim=32,
        max_sequence_length=16,
    )
    config.update(kwargs)
    return causal_lm(**config)


def argmax_continuation(model, prompt, steps):
    """Greedy decoding by the full, uncached forward pass: the reference."""
    tokens = list(prompt)
    for _ in range(steps):
        logits = model(np.array([tokens]))
        tokens.append(int(np.argmax(logits[0, -1])))
    return tokens


def injected():
    """A model whose greedy next token is NEXT[current] (tests/models/injected)."""
    model = tiny(hidden_dim=WIDTH, intermediate_dim=WIDTH, position_encoding="rotary")
    return model, inject(model, VOCAB)


# Models shared by the tests that only read them: each compiles its loop once
# per batch size for the whole module (the settings are tensors of that loop).
@pytest.fixture(scope="module")
def plain():
    return tiny()


@pytest.fixture(scope="module")
def rotary():
    return tiny(position_encoding="rotary", num_key_value_heads=1)


@pytest.fixture(scope="module", name="injected_model")
def injected_model_fixture():
    return injected()


def test_fit_with_jit_compile_lowers_the_loss():
    # A short learning check; what decoding returns is pinned below with
    # injected weights, not with what a few epochs happened to learn.
    rng = np.random.default_rng(0)
    sequences = np.tile(rng.integers(1, VOCAB, size=(256, 3)), (1, 4))
    model = tiny()
    model.compile(
        optimizer=keras.optimizers.Adam(1e-2),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=True,
    )
    history = model.fit(
        sequences[:, :-1], sequences[:, 1:], epochs=3, batch_size=32, verbose=0
    )
    losses = history.history["loss"]
    assert losses[-1] < 0.8 * losses[0], losses


def follow(prompt, steps, stop=()):
    successor_of = successor(VOCAB)
    row = list(prompt)
    for _ in range(steps):
        row.append(successor_of[row[-1]])
        if row[-1] in stop:
            break
    return row


def test_greedy_follows_the_injected_successor(injected_model):
    model, successor_of = injected_model
    assert successor_of[11] == 1 and successor_of[3] == 4
    prompts = [[3, 9, 8, 3], [6, 7, 2, 6, 7]]
    expected = [[3, 9, 8, 3, 4, 5, 6, 7, 8], [6, 7, 2, 6, 7, 8, 9, 10, 11, 1]]
    assert expected == [follow(p, 5) for p in prompts]
    assert model.generate(prompts, max_new_tokens=5) == expected
    beam = model.generate(prompts, max_new_tokens=5, sampler="beam", num_beams=3)
    assert beam == expected


def test_stop_token_ends_each_row(injected_model):
    model, _ = injected_model
    generated = model.generate(
        [[3, 9, 8, 3], [6, 7, 2, 6, 7]], max_new_tokens=5, stop_token_ids=[5, 9]
    )
    # Each row ends at its first stop token, the stop token included.
    assert generated == [[3, 9, 8, 3, 4, 5], [6, 7, 2, 6, 7, 8, 9]]
    assert generated == [
        follow(p, 5, stop=(5, 9)) for p in [[3, 9, 8, 3], [6, 7, 2, 6, 7]]
    ]


# The reference forward pass of the one-token prompt meets a keras-tfm layer
# issue: attention_kernel's `ops.softmax` over a key axis of size 1 warns.
@pytest.mark.filterwarnings("ignore:You are using a softmax over axis -1")
@pytest.mark.parametrize("position_encoding", ["learned", "sinusoidal", "rotary"])
def test_greedy_batch_equals_argmax_of_full_forward_per_row(position_encoding, request):
    if position_encoding == "rotary":  # the shared one: its loops are compiled
        model = request.getfixturevalue("rotary")
    else:
        model = tiny(position_encoding=position_encoding, num_key_value_heads=1)
    prompts = [[5, 6, 7, 8], [9], [3, 4]]
    generated = model.generate(prompts, max_new_tokens=6)
    for prompt, row in zip(prompts, generated, strict=True):
        assert row == argmax_continuation(model, prompt, 6)


def test_generate_accepts_a_padded_dense_array(plain):
    model = plain
    dense = np.array([[5, 6, 7], [9, 0, 0]])
    assert model.generate(dense, max_new_tokens=3) == model.generate(
        [[5, 6, 7], [9]], max_new_tokens=3
    )


def test_beam_search_rows_of_a_padded_batch_equal_rows_alone(plain):
    model = plain
    prompts = [[3, 9, 8, 3, 9], [5, 4]]
    batch = model.generate(prompts, max_new_tokens=4, sampler="beam", num_beams=3)
    alone = [
        model.generate(p, max_new_tokens=4, sampler="beam", num_beams=3)
        for p in prompts
    ]
    assert batch == alone


def test_beam_width_one_equals_greedy_and_loop_is_not_retraced(plain):
    model = plain
    prompts = [[5, 6, 7], [9, 1]]
    greedy = model.generate(prompts, max_new_tokens=5)
    beam = model.generate(prompts, max_new_tokens=5, sampler="beam", num_beams=1)
    assert beam == greedy
    # Other prompt lengths in the same buffer reuse the compiled loop.
    traced = [f.experimental_get_tracing_count() for f in model.compiled_loops.values()]
    greedy_again = model.generate([[1, 2], [4]], max_new_tokens=5)
    assert [len(row) for row in greedy_again] == [7, 6]
    functions = model.compiled_loops.values()
    assert [f.experimental_get_tracing_count() for f in functions] == traced


def test_sampling_top_k_one_is_greedy_and_seed_repeats(plain):
    model = plain
    prompts = [[5, 6, 7], [9, 1]]
    greedy = model.generate(prompts, max_new_tokens=5)
    assert model.generate(prompts, 5, sampler="top_k", top_k=1, seed=3) == greedy
    first = model.generate(prompts, 8, sampler="top_p", top_p=0.9, seed=7)
    second = model.generate(prompts, 8, sampler="top_p", top_p=0.9, seed=7)
    assert first == second
    assert first != model.generate(prompts, 8, sampler="top_p", top_p=0.9, seed=8)


@pytest.mark.parametrize("position_encoding", ["learned", "sinusoidal", "rotary"])
def test_cached_logits_equal_full_forward(position_encoding):
    model = tiny(
        num_layers=2, position_encoding=position_encoding, num_key_value_heads=1
    )
    tokens = np.array([[5, 6, 7, 8, 9, 10], [1, 2, 3, 4, 5, 6]])
    expected = keras.ops.convert_to_numpy(model(tokens))
    cache = model.empty_cache(2, 8)
    # Prefill three tokens at once, then one token per step.
    logits, cache = model.call_with_cache(tokens[:, :3], cache, 0)
    steps = [keras.ops.convert_to_numpy(logits)]
    for t in range(3, 6):
        logits, cache = model.call_with_cache(tokens[:, t : t + 1], cache, t)
        steps.append(keras.ops.convert_to_numpy(logits))
    np.testing.assert_allclose(np.concatenate(steps, 1), expected, atol=1e-5)


def logits_with_embedding_row(model, token_ids, row, values):
    """Logits with the token embedding's `row` replaced by `values`.

    Changing what the embedding table holds for an id changes what sits at
    every position with that id: for the padding id, the padded positions.
    """
    (table,) = [w for w in model.weights if tuple(w.shape) == (VOCAB, 16)]
    saved = table.numpy()
    changed = saved.copy()
    changed[row] = values
    table.assign(changed)
    try:
        return keras.ops.convert_to_numpy(model(token_ids))
    finally:
        table.assign(saved)


@pytest.mark.parametrize("position_encoding", ["learned", "rotary"])
def test_padding_tokens_are_not_attended_to(position_encoding):
    # Padding on the left and in the middle: the causal mask hides neither.
    token_ids = np.array([[0, 0, 5, 6, 7, 8], [5, 0, 6, 0, 0, 7]])
    real = token_ids != 0
    model = tiny(position_encoding=position_encoding)
    noise = 10 * np.random.default_rng(0).normal(size=16)
    base = keras.ops.convert_to_numpy(model(token_ids))
    perturbed = logits_with_embedding_row(model, token_ids, 0, noise)
    # Column 0 is the padding id's own logit, which the tied output projection
    # reads from the changed row; every other logit of a real token must hold.
    np.testing.assert_allclose(perturbed[real][:, 1:], base[real][:, 1:], atol=1e-5)

    # The control: the same weights with another padding id, so that id 0 is
    # an ordinary token whose change reaches the real tokens after it.
    unmasked = tiny(position_encoding=position_encoding, padding_id=VOCAB - 1)
    unmasked.set_weights(model.get_weights())
    base = keras.ops.convert_to_numpy(unmasked(token_ids))
    perturbed = logits_with_embedding_row(unmasked, token_ids, 0, noise)
    after_a_zero = real & (np.cumsum(~real, axis=1) > 0)
    leak = np.abs(perturbed - base)[after_a_zero][:, 1:].max(axis=-1)
    assert np.all(leak > 1e-3), leak


def test_save_and_load_with_tokenizer(tmp_path):
    model = tiny(
        vocabulary_size=256,
        max_sequence_length=24,
        tokenizer=keras_hub.tokenizers.ByteTokenizer(),
    )
    path = str(tmp_path / "m.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    tokens = np.array([[104, 105, 33, 0]])
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(loaded(tokens)),
        keras.ops.convert_to_numpy(model(tokens)),
    )
    assert loaded.get_config() == model.get_config()
    assert isinstance(loaded.tokenizer, keras_hub.tokenizers.ByteTokenizer)
    text = model.generate(["hi", "abc"], max_new_tokens=4)
    assert loaded.generate(["hi", "abc"], max_new_tokens=4) == text
    assert text[0].startswith("hi") and text[1].startswith("abc")


def test_config_is_the_constructor_arguments():
    model = tiny(position_encoding="rotary", normalization="rms_norm")
    config = model.get_config()
    rebuilt = CausalLM.from_config(config)
    assert rebuilt.get_config() == config
    assert config["backbone"]["config"]["position_encoding"] == "rotary"
    assert len(rebuilt.weights) == len(model.weights)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda m: m.generate([[1] * 14], max_new_tokens=3), "max_sequence_length"),
        (lambda m: m.generate([[1] * 17], max_new_tokens=1), "max_sequence_length"),
        (lambda m: m.generate([[1, 2], []], max_new_tokens=3), r"inputs\[1\]"),
        (lambda m: m.generate([[1, 2]], max_new_tokens=0), "max_new_tokens=0"),
        (lambda m: m.generate([[1, 2]], max_new_tokens=2.5), "max_new_tokens"),
        (lambda m: m.generate([[1, 2]], 3, sampler="nucleus"), "'nucleus'"),
        (lambda m: m.generate([[1, 2]], 3, num_beams=0), "num_beams=0"),
        (lambda m: m.generate([[1, 2]], 3, sampler="top_k", num_beams=2), "num_beams"),
        (lambda m: m.generate([[1, 99]], 3), r"outside \[0, 12\)"),
        (lambda m: m.generate(np.ones((2, 3), "float32"), 3), "float32"),
        (lambda m: m.generate(np.ones((2, 3, 1), "int32"), 3), r"\(2, 3, 1\)"),
        (lambda m: m.generate("hello", 3), "no preprocessor"),
        (lambda m: m.generate([[1]], 3, stop_token_ids=[12]), "stop_token_ids"),
        (lambda m: m(np.ones((2, 3, 1), "int32")), "token_ids"),
        (lambda m: m(np.ones((2, 3), "float32")), "float32"),
        (lambda m: m(np.ones((1, 17), "int32")), "max_sequence_length"),
    ],
)
def test_bad_inputs_raise_value_error(call, match, plain):
    with pytest.raises(ValueError, match=match):
        call(plain)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"position_encoding": "alibi"}, "position_encoding"),
        ({"vocabulary_size": 0}, "vocabulary_size=0"),
        ({"padding_id": 12}, "padding_id=12"),
        ({"dropout": 1.5}, "dropout=1.5"),
    ],
)
def test_bad_arguments_raise_value_error(kwargs, match):
    with pytest.raises(ValueError, match=match):
        tiny(**kwargs)


def ngrams(row, n):
    return [tuple(row[i : i + n]) for i in range(len(row) - n + 1)]


@pytest.mark.parametrize("sampler", ["greedy", "beam"])
def test_processors_reach_greedy_and_beam_search(sampler, injected_model):
    model, _ = injected_model
    beams = dict(num_beams=2) if sampler == "beam" else {}
    prompts = [[3, 4, 3], [6, 7, 2, 6]]
    plain = model.generate(prompts, 6, sampler=sampler, **beams)
    assert any(len(set(ngrams(r, 2))) < len(ngrams(r, 2)) for r in plain)
    banned = model.generate(
        prompts, 6, sampler=sampler, no_repeat_ngram_size=2, bad_words_ids=[[8]],
        **beams,
    )  # fmt: skip
    for row in banned:
        assert len(set(ngrams(row, 2))) == len(ngrams(row, 2)), row
    assert all(8 not in row[3:] for row in banned)


SAMPLED = [
    dict(sampler="random", seed=5, temperature=1.5, repetition_penalty=1.3),
    dict(sampler="top_k", top_k=4, seed=6, presence_penalty=0.5,
         frequency_penalty=0.5, no_repeat_ngram_size=2),
    dict(sampler="top_p", top_p=0.8, min_p=0.05, seed=7, bad_words_ids=[[3], [5, 6]]),
]  # fmt: skip


@pytest.mark.parametrize("settings", SAMPLED)
def test_sampled_rows_of_a_batch_equal_rows_alone(settings, rotary):
    model = rotary
    prompts = [[5, 6, 7, 8, 9], [9], [3, 4]]
    batch = model.generate(prompts, max_new_tokens=7, **settings)
    alone = [model.generate(p, max_new_tokens=7, **settings) for p in prompts]
    assert batch == alone
    assert batch != model.generate(prompts, 7, **{**settings, "seed": 99})


def test_one_compiled_loop_serves_every_setting_and_prompt_length():
    model = tiny()
    calls = [
        ([[5, 6, 7], [9, 1]], {}),
        ([[1, 2, 3, 4, 5, 6, 7]], dict(sampler="top_p", top_p=0.9, seed=1)),
        ([[4]], dict(sampler="random", temperature=0.3, repetition_penalty=1.2)),
        ([[4, 2]], dict(sampler="top_k", top_k=2, min_p=0.1, no_repeat_ngram_size=3)),
        ([[8, 8, 8, 8, 8]], dict(frequency_penalty=1.0, stop_token_ids=[3, 4, 5])),
    ]
    for prompts, settings in calls:
        model.generate(prompts, max_new_tokens=4, **settings)
    # Batch 2 and batch 1: one trace each, of the one compiled loop.
    (function,) = model.compiled_loops.values()
    assert function.experimental_get_tracing_count() == 2


def test_scores_are_the_log_softmax_of_the_full_forward_pass(plain):
    model = plain
    prompts = [[5, 6, 7], [9]]
    outputs, scores = model.generate(prompts, 4, return_scores=True)
    for prompt, row, row_scores in zip(prompts, outputs, scores, strict=True):
        logits = np.asarray(model(np.array([row[:-1]])), "float64")[0]
        shifted = logits - logits.max(-1, keepdims=True)
        log_softmax = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
        expected = [log_softmax[i - 1, row[i]] for i in range(len(prompt), len(row))]
        np.testing.assert_allclose(row_scores, expected, atol=1e-5)

import keras
import keras_hub
import numpy as np
import pytest

from keras_tfm.models import Seq2SeqLM
from tests.builders import seq2seq_lm
from tests.models.injected import WIDTH, inject

VOCAB, START, STOP = 12, 1, 2


def tiny(**kwargs):
    config = dict(
        vocabulary_size=VOCAB,
        num_encoder_layers=1,
        num_decoder_layers=1,
        num_heads=2,
        hidden_dim=16,
        intermediate_dim=32,
        max_sequence_length=16,
    )
    config.update(kwargs)
    config.setdefault("start_token_id", START)
    return seq2seq_lm(**config)


def argmax_decoding(model, source, steps):
    """Greedy decoding by the full, uncached forward pass: the reference."""
    target = [START]
    while len(target) <= steps and target[-1] != STOP:
        logits = model(
            {"source_ids": np.array([source]), "target_ids": np.array([target])}
        )
        target.append(int(np.argmax(logits[0, -1])))
    return target[1:]


def injected():
    """A model whose greedy next token is NEXT[previous] (tests/models/injected):
    pre-LN with rotary positions, so nothing but the FFN moves the state."""
    model = tiny(
        hidden_dim=WIDTH, intermediate_dim=WIDTH, position_encoding="rotary",
        normalize_first=True,
    )  # fmt: skip
    return model, inject(model, VOCAB)


@pytest.fixture(scope="module")
def plain():
    """One model for the tests that only read it: its loops compile once."""
    return tiny()


def test_teacher_forcing_shifts_right_with_the_start_token():
    inputs, labels = Seq2SeqLM.teacher_forcing(
        np.array([[5, 6, 2, 0], [7, 2, 0, 0]]), START
    )
    np.testing.assert_array_equal(inputs, [[1, 5, 6, 2], [1, 7, 2, 0]])
    np.testing.assert_array_equal(labels, [[5, 6, 2, 0], [7, 2, 0, 0]])
    with pytest.raises(ValueError, match="target_ids"):
        Seq2SeqLM.teacher_forcing(np.array([1.0, 2.0]), START)


def test_fit_with_jit_compile_lowers_the_loss():
    # A short learning check; what decoding returns is pinned below with
    # injected weights, not with what 16 epochs happened to learn.
    rng = np.random.default_rng(0)
    source = rng.integers(3, VOCAB, size=(256, 4))
    target = np.concatenate([source[:, ::-1], np.full((256, 1), STOP)], axis=1)
    decoder_inputs, labels = Seq2SeqLM.teacher_forcing(target, START)
    model = tiny()
    model.compile(
        optimizer=keras.optimizers.Adam(1e-2),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=True,
    )
    history = model.fit(
        {"source_ids": source, "target_ids": decoder_inputs},
        labels,
        epochs=3,
        batch_size=32,
        verbose=0,
    )
    losses = history.history["loss"]
    assert losses[-1] < 0.8 * losses[0], losses


def test_greedy_and_beam_follow_the_injected_successor_and_stop():
    model, successor_of = injected()
    # From START (1): 2 is STOP, so a row stops at once unless STOP is not
    # a stop token; successor_of skips only the padding id 0.
    assert successor_of[START] == STOP and successor_of[11] == 1
    sources = [[3, 4, 5, 6], [11, 7]]
    unstopped = [2, 3, 4, 5, 6, 7]  # START -> 2 -> 3 -> ...
    assert model.generate(sources, 6) == [unstopped, unstopped]
    beam = model.generate(sources, 6, sampler="beam", num_beams=3)
    assert beam == [unstopped, unstopped]
    stopped = model.generate(sources, 6, stop_token_ids=[5])
    assert stopped == [[2, 3, 4, 5], [2, 3, 4, 5]]


# The reference's first step decodes one token, which meets a keras-tfm layer
# issue: attention_kernel's `ops.softmax` over a key axis of size 1 warns.
@pytest.mark.filterwarnings("ignore:You are using a softmax over axis -1")
def test_greedy_equals_argmax_of_full_forward_and_padding_is_ignored(plain):
    model = plain
    sources = [[3, 4, 5, 6], [8, 9, 10]]
    # The same settings as in the test above: the compiled loop is reused.
    generated = model.generate(sources, 8, stop_token_ids=[STOP])
    for source, row in zip(sources, generated, strict=True):
        assert row == argmax_decoding(model, source, 8)
    # A dense, padded source gives the same as the list of lists.
    dense = np.array([[3, 4, 5, 6], [8, 9, 10, 0]])
    assert model.generate(dense, 8, stop_token_ids=[STOP]) == generated


def test_beam_rows_of_a_padded_batch_equal_rows_alone(plain):
    model = plain
    sources = [[3, 4, 5, 6], [8, 9]]
    batch = model.generate(sources, 6, stop_token_ids=[STOP], num_beams=3)
    alone = [
        model.generate(s, 6, stop_token_ids=[STOP], num_beams=3) for s in sources
    ]
    assert batch == alone


def test_beam_width_one_equals_greedy(plain):
    model = plain
    sources = [[3, 4, 5], [6, 7, 8, 9]]
    greedy = model.generate(sources, 6)
    beam = model.generate(sources, 6, sampler="beam", num_beams=1)
    assert beam == greedy
    traced = [f.experimental_get_tracing_count() for f in model.compiled_loops.values()]
    assert model.generate([[9, 8], [5, 4, 3]], 6)  # same shapes: no retrace
    functions = model.compiled_loops.values()
    assert [f.experimental_get_tracing_count() for f in functions] == traced


@pytest.mark.parametrize(
    "position_encoding, normalize_first",
    [
        ("sinusoidal", False),
        ("sinusoidal_split", False),
        ("learned", True),
        ("rotary", False),
    ],
)
def test_cached_logits_equal_full_forward(position_encoding, normalize_first):
    model = tiny(
        num_decoder_layers=2,
        position_encoding=position_encoding,
        normalize_first=normalize_first,
        # Marian's options on the sinusoidal_split row; harmless elsewhere.
        use_logits_bias=position_encoding == "sinusoidal_split",
        activation="silu" if position_encoding == "sinusoidal_split" else "relu",
    )
    if model.logits_bias is not None:
        model.logits_bias.bias.assign(np.linspace(-1, 1, VOCAB))
    source = np.array([[3, 4, 5, 0], [6, 7, 8, 9]])
    target = np.array([[1, 5, 6, 7, 8], [1, 9, 10, 11, 3]])
    expected = keras.ops.convert_to_numpy(
        model({"source_ids": source, "target_ids": target})
    )
    cross = model.compute_cross_attention_cache(model.backbone.encode(source))
    source_mask = source != 0
    cache = model.empty_cache(2, 6)
    logits, cache = model.call_with_cache(target[:, :2], cache, 0, cross, source_mask)
    steps = [keras.ops.convert_to_numpy(logits)]
    for t in range(2, 5):
        logits, cache = model.call_with_cache(
            target[:, t : t + 1], cache, t, cross, source_mask
        )
        steps.append(keras.ops.convert_to_numpy(logits))
    np.testing.assert_allclose(np.concatenate(steps, 1), expected, atol=1e-5)


def test_source_padding_is_ignored(plain):
    model = plain
    target = np.array([[1, 5, 6]])
    short = model({"source_ids": np.array([[3, 4]]), "target_ids": target})
    padded = model({"source_ids": np.array([[3, 4, 0, 0]]), "target_ids": target})
    np.testing.assert_allclose(padded, short, atol=1e-6)


def test_logits_bias_is_added_to_every_position():
    plain = tiny()
    biased = tiny(use_logits_bias=True)
    assert len(biased.weights) == len(plain.weights) + 1
    biased.set_weights(plain.get_weights() + [np.arange(VOCAB, dtype="float32")])
    assert biased.logits_bias.bias.path == "logits_bias/bias"
    inputs = {"source_ids": np.array([[3, 4, 0]]), "target_ids": np.array([[1, 5, 6]])}
    np.testing.assert_allclose(
        np.asarray(biased(inputs)),
        np.asarray(plain(inputs)) + np.arange(VOCAB),
        atol=1e-5,
    )


def test_scale_embeddings_off_adds_positions_to_the_raw_embedding():
    scaled, raw = tiny(), tiny(scale_embeddings=False)
    raw.set_weights(scaled.get_weights())
    ids = np.array([[3, 4, 5]])
    table = np.asarray(scaled.backbone.token_embedding.embeddings)[ids[0]]
    positions = np.asarray(scaled.backbone.embed_target(ids))[0] - table * np.sqrt(16)
    np.testing.assert_allclose(
        np.asarray(raw.backbone.embed_target(ids))[0], table + positions, atol=1e-5
    )


@pytest.mark.parametrize(
    "options",
    [
        {"scale_embeddings": False, "use_logits_bias": True},
        {"position_encoding": "sinusoidal_split", "activation": "silu"},
    ],
)
def test_new_options_round_trip_through_the_config(options):
    model = tiny(**options)
    config = model.get_config()
    flat = {**config["backbone"]["config"], **config}
    assert {k: flat[k] for k in options} == options
    again = Seq2SeqLM.from_config(config)
    assert again.get_config() == config


def test_embeddings_are_shared_three_ways(plain):
    model = plain
    embeddings = [w for w in model.weights if "embeddings" in w.path]
    assert len(embeddings) == 1  # source, target and output projection


def test_save_and_load_with_tokenizer(tmp_path):
    model = tiny(vocabulary_size=256, tokenizer=keras_hub.tokenizers.ByteTokenizer())
    path = str(tmp_path / "m.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    inputs = {"source_ids": np.array([[104, 105, 0]]), "target_ids": np.array([[1, 5]])}
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(loaded(inputs)),
        keras.ops.convert_to_numpy(model(inputs)),
    )
    assert loaded.get_config() == model.get_config()
    text = model.generate(["hi", "abc"], 4)
    assert loaded.generate(["hi", "abc"], 4) == text
    assert isinstance(text[0], str)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda m: m.generate([[3] * 17], 3), "max_sequence_length"),
        (lambda m: m.generate([[3]], 16), "max_new_tokens"),
        (lambda m: m.generate([[3], []], 3), r"inputs\[1\]"),
        (lambda m: m.generate([[3]], 0), "max_new_tokens=0"),
        (lambda m: m.generate([[3]], 3, sampler="viterbi"), "'viterbi'"),
        (lambda m: m.generate(np.ones((1, 2), "float32"), 3), "float32"),
        (lambda m: m.generate(np.ones((1, 2, 2), "int32"), 3), "shape"),
        (lambda m: m({"source_ids": np.ones((1, 2), "int32")}), "target_ids"),
        (
            lambda m: m(
                {
                    "source_ids": np.ones((1, 2, 1), "int32"),
                    "target_ids": np.ones((1, 2), "int32"),
                }
            ),
            "source_ids",
        ),
    ],
)
def test_bad_inputs_raise_value_error(call, match, plain):
    with pytest.raises(ValueError, match=match):
        call(plain)


@pytest.mark.parametrize(
    "settings",
    [
        dict(sampler="top_p", top_p=0.9, seed=3, repetition_penalty=1.4),
        dict(sampler="random", seed=4, no_repeat_ngram_size=2, bad_words_ids=[[2]]),
        dict(sampler="beam", num_beams=2, presence_penalty=1.0, frequency_penalty=0.5),
    ],
)
def test_rows_of_a_batch_equal_rows_alone_with_processors(settings, plain):
    model = plain
    sources = [[3, 4, 5], [6, 7, 8, 9, 5, 4], [9]]
    batch = model.generate(sources, 6, **settings)
    assert batch == [model.generate(s, 6, **settings) for s in sources]

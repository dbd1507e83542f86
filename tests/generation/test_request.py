"""The request of `generate`: each refused combination, and the strategy
each valid one runs on. No decoding here: `GenerationRequest.build` and
`strategy_for` only read the model's configuration."""

import keras_hub
import pytest

from keras_tfm.generation import GenerationConfig
from keras_tfm.generation.request import GenerationRequest
from keras_tfm.generation.strategies import (
    beam,
    buffered,
    sliding,
    speculative,
    strategy_for,
    streamed,
)
from tests.builders import causal_lm, seq2seq_lm

LENGTH = 16


@pytest.fixture(scope="module")
def model():
    return causal_lm(
        vocabulary_size=23, num_layers=1, num_heads=2, hidden_dim=8,
        intermediate_dim=16, max_sequence_length=LENGTH,
        position_encoding="rotary",
    )  # fmt: skip


SHORT = [[3, 4, 5]]
LONG = [[3] * (LENGTH - 2)]  # with 4 new tokens, past the window: slides


def build(model, rows=SHORT, max_new_tokens=4, **settings):
    return GenerationRequest.build(model, rows, max_new_tokens, **settings)


@pytest.mark.parametrize(
    "rows, settings, expected",
    [
        (SHORT, {}, buffered),
        (SHORT, dict(sampler="top_p", top_p=0.5, seed=1), buffered),
        (SHORT, dict(return_scores=True, top_logprobs=2), buffered),
        (SHORT, dict(sampler="beam", num_beams=2), beam),
        (SHORT, dict(num_beams=3), beam),
        (SHORT, dict(sampler=keras_hub.samplers.GreedySampler()), beam),
        (SHORT, dict(stream=True), streamed),
        (LONG, dict(stream=True), streamed),
        (SHORT, dict(stream=True, sampler=keras_hub.samplers.GreedySampler()),
         streamed),
        (LONG, {}, sliding),
        (LONG, dict(sampler=keras_hub.samplers.GreedySampler()), sliding),
        (SHORT, dict(draft="prompt_lookup"), speculative),
    ],
)  # fmt: skip
def test_strategy_for_picks_the_strategy_of_each_mode(model, rows, settings, expected):
    stream = settings.pop("stream", False)
    request = build(model, rows, stream=stream, **settings)
    assert strategy_for(request, model) is expected
    assert request.slides == (rows is LONG)


@pytest.mark.parametrize(
    "rows, settings, message",
    [
        (SHORT, dict(sampler="beam", num_beams=2, stream=True),
         "Beam search runs as one compiled loop: it cannot stream"),
        (LONG, dict(sampler="beam", num_beams=2),
         "past max_sequence_length=16"),
        (SHORT, dict(return_scores=True, stream=True),
         "`return_scores` is given by the built-in.*stream=True"),
        (SHORT, dict(return_scores=True, num_beams=2),
         "`return_scores` is given by the built-in"),
        (SHORT, dict(return_scores=True,
                     sampler=keras_hub.samplers.GreedySampler()),
         "`return_scores`.*sampler=<keras_hub"),
        (LONG, dict(return_scores=True), "sliding window=True"),
        (SHORT, dict(stop_strings=["x"], num_beams=2),
         "`stop_strings` are checked by the built-in"),
        (SHORT, dict(stop_strings=["x"],
                     sampler=keras_hub.samplers.GreedySampler()),
         "carries its own settings.*Received: stop_strings"),
        (LONG, dict(stop_strings=["x"]),
         "past the context window only with stream=True"),
        (SHORT, dict(draft="prompt_lookup", sampler="top_k"),
         "Speculative decoding .* sampler='top_k'"),
        (SHORT, dict(draft="prompt_lookup", repetition_penalty=1.2),
         "no sampler settings, processors"),
        (SHORT, dict(draft="prompt_lookup", stream=True), "stream=True"),
        (SHORT, dict(draft="prompt_lookup", return_scores=True),
         "return_scores=True"),
        (SHORT, dict(top_logprobs=2), "needs `return_scores=True`"),
        (SHORT, dict(window_shift=LENGTH), "Received: window_shift=16"),
    ],
)  # fmt: skip
def test_each_refused_combination_says_what_it_received(model, rows, settings, message):
    stream = settings.pop("stream", False)
    with pytest.raises(ValueError, match=message):
        build(model, rows, stream=stream, **settings)


def test_a_misspelt_setting_is_python_s_own_type_error(model):
    with pytest.raises(TypeError, match="unexpected keyword argument 'temprature'"):
        build(model, temprature=0.5)
    with pytest.raises(TypeError, match="unexpected keyword argument 'temprature'"):
        model.generate(SHORT, 4, temprature=0.5)


def test_max_new_tokens_is_checked_first(model):
    with pytest.raises(ValueError, match="Received: max_new_tokens=0"):
        build(model, max_new_tokens=0, return_scores=True, stream=True)
    with pytest.raises(ValueError, match="max_new_tokens=None"):
        model.generate(SHORT)


def test_validate_holds_the_rules_without_a_model():
    request = GenerationRequest([GenerationConfig()], 4, draft="prompt_lookup")
    request.validate()  # plain greedy of a decoder-only model
    request.decoder_only, request.model_name = False, "Seq2SeqLM"
    with pytest.raises(ValueError, match="decoder-only model.*model Seq2SeqLM"):
        request.validate()
    sampled = GenerationRequest([GenerationConfig(sampler="random")], 4, stream=True)
    sampled.validate()  # streamed sampling is fine
    sampled.return_scores = True
    with pytest.raises(ValueError, match="return_scores"):
        sampled.validate()


def test_decoder_only_is_a_class_attribute_of_the_family():
    translator = seq2seq_lm(
        vocabulary_size=20, num_encoder_layers=1, num_decoder_layers=1,
        num_heads=2, hidden_dim=8, intermediate_dim=16, max_sequence_length=16,
        start_token_id=1,
    )  # fmt: skip
    assert not translator.is_decoder_only
    with pytest.raises(ValueError, match="decoder-only model.*model Seq2SeqLM"):
        GenerationRequest.build(translator, [[3, 4]], 4, draft="prompt_lookup")
    request = GenerationRequest.build(translator, [[3, 4]], 4, num_beams=2)
    assert strategy_for(request, translator) is beam


def test_the_signature_lists_every_setting(model):
    # What `inspect` readers see (the command line checks its flags on it).
    import inspect

    parameters = inspect.signature(model.generate).parameters
    assert list(parameters)[:4] == [
        "inputs",
        "max_new_tokens",
        "generation_config",
        "stream",
    ]
    assert {"top_k", "min_p", "draft", "stop_strings"} <= set(parameters)
    assert parameters["return_scores"].default is False

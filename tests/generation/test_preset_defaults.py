"""A preset's generation_config.json: the defaults of `generate`, which any
argument a call sets overrides."""

import json

import pytest
from keras_hub.samplers import GreedySampler

from keras_tfm.generation import GenerationConfig
from keras_tfm.generation.generation_config import request_base
from keras_tfm.zoo.catalogue import GENERATION_FILE, with_generation_defaults
from tests.builders import causal_lm
from tests.models.test_causal_lm import follow, injected


def test_generate_uses_the_preset_defaults_unless_the_call_sets_them(tmp_path):
    model, _ = injected()
    # The injected model continues 3 with 4, 5, 6...; banning 5 after 4
    # changes the plain greedy output, which pins which setting ran.
    (tmp_path / GENERATION_FILE).write_text(
        json.dumps({"_source": "a test", "bad_words_ids": [[4, 5]]})
    )
    plain = model.generate([3], 3)
    assert plain == follow([3], 3) == [3, 4, 5, 6]
    assert with_generation_defaults(model, tmp_path) is model
    assert model.generation_config == GenerationConfig(bad_words_ids=[[4, 5]])
    banned = model.generate([3], 3)
    assert banned[:2] == [3, 4] and banned[2] != 5
    assert banned == model.generate([3], 3, generation_config=model.generation_config)
    # A sampler chosen by the call keeps the preset's processors ...
    assert model.generate([3], 3, sampler="greedy") == banned
    # ... and a setting given by the call, or a whole config, wins.
    assert model.generate([3], 3, bad_words_ids=[]) == plain
    assert model.generate([3], 3, generation_config=GenerationConfig()) == plain
    # Speculative decoding is plain greedy, a sampler object takes no
    # processor: neither starts from the defaults.
    for sampler, draft in ((None, "prompt_lookup"), (GreedySampler(), None)):
        assert request_base(model.generation_config, sampler, None, draft) is None


def test_a_bad_generation_config_file_is_refused(tmp_path):
    (tmp_path / GENERATION_FILE).write_text(json.dumps({"temprature": 0.5}))
    model = causal_lm(
        vocabulary_size=8, num_layers=1, num_heads=1, hidden_dim=4,
        intermediate_dim=4, max_sequence_length=8,
    )  # fmt: skip
    with pytest.raises(ValueError, match=r"GenerationConfig fields.*\['temprature'\]"):
        with_generation_defaults(model, tmp_path)

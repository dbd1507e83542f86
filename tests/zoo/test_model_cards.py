"""The model cards' usage snippets run as doctests; task presets answer strings."""

import doctest
import re

import keras_hub
import numpy as np
import pytest

from keras_tfm import zoo
from tests.builders import causal_lm

TRAINED_TASKS = (
    "fortunes_classifier",
    "kjv_gpt",
    "translator_de_en",
    "translator_es_en",
)
_PYTHON_BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)


def card_examples(name):
    """The doctest examples of the ```python blocks of a preset's card."""
    blocks = _PYTHON_BLOCK.findall(zoo.preset_card(name))
    parser = doctest.DocTestParser()
    return [
        parser.get_doctest(block, {}, f"{name}/README.md", None, 0)
        for block in blocks
        if ">>>" in block
    ]


def run(test):
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    runner.run(test)
    return runner.summarize(verbose=False)


@pytest.fixture(scope="module")
def presets():
    """`zoo.from_preset(name)`, each preset loaded once for the module: a
    second copy of a generator traces and compiles its decoding loop again
    (seconds) for the same answers."""
    loaded, from_preset = {}, zoo.from_preset  # not the patched one below

    def load(name):
        if name not in loaded:
            loaded[name] = from_preset(name)
        return loaded[name]

    return load


@pytest.fixture
def shared_presets(presets, monkeypatch):
    """`zoo.from_preset` answers with the module's copy (no other arguments)."""
    load = zoo.from_preset
    monkeypatch.setattr(
        zoo, "from_preset", lambda name, **kw: load(name, **kw) if kw else presets(name)
    )
    return presets


@pytest.mark.parametrize("name", TRAINED_TASKS)
def test_the_card_of_a_trained_preset_uses_it_in_two_lines_that_run(
    name, shared_presets
):
    tests = card_examples(name)
    assert len(tests) == 1
    lines = [example.source for example in tests[0].examples]
    assert lines[0] == "import keras_tfm\n"
    assert lines[1] == f'model = keras_tfm.zoo.from_preset("{name}")\n'
    assert len(lines) == 3 and lines[2].startswith("model.")
    result = run(tests[0])
    assert result.attempted == 3 and result.failed == 0


def test_every_card_with_examples_runs():
    names = [name for name in zoo.list_presets() if card_examples(name)]
    assert set(TRAINED_TASKS) | {"smollm2_135m_instruct"} <= set(names)
    for name in sorted(set(names) - set(TRAINED_TASKS) - {"smollm2_135m_instruct"}):
        for test in card_examples(name):
            assert run(test).failed == 0, name


def test_the_smollm2_card_runs(smollm2, monkeypatch):
    # The session's SmolLM2 stands in for a second load of the same preset.
    monkeypatch.setattr(zoo, "from_preset", lambda name: smollm2)
    (test,) = card_examples("smollm2_135m_instruct")
    assert test.examples[1].source.startswith("model = keras_tfm.zoo.from_preset(")
    assert run(test).failed == 0


def test_the_classifier_preset_answers_a_string_with_a_label_name(presets):
    model = presets("fortunes_classifier")
    labels = zoo.preset_labels("fortunes_classifier")
    assert labels == model.class_names and len(labels) == model.num_classes
    assert model.classify("A penny saved is a penny earned.") in labels
    assert model.predict(["A penny saved is a penny earned."], verbose=0).shape == (
        1,
        len(labels),
    )


def test_the_translator_preset_answers_a_string_with_clean_text(presets):
    model = presets("translator_de_en")
    text = model.generate("Ich habe einen Hund.", max_new_tokens=16)
    assert text == "I have a dog."  # as the README and the card say
    for special in ("[START]", "[END]", "[PAD]"):
        assert special not in text
    # WordPiece splits punctuation off; the string puts it back.
    assert not re.search(r" [.,!?’']", text), text


def log_likelihood(model, text):
    """The mean float64 log-probability of `text`'s tokens after the first."""
    ids = np.asarray(model.tokenizer(text), "int32")[None]
    logits = np.asarray(model(ids[:, :-1]), "float64")
    logits -= logits.max(-1, keepdims=True)
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    return np.take_along_axis(log_probs, ids[:, 1:, None], -1).mean()


def test_the_generator_preset_knows_kjv_word_order(presets):
    """A verse is far likelier (per token) than its words shuffled under the
    trained weights (3.0 nats a token apart), not under the same
    architecture's random weights (0.05): the test tells the two apart, which
    `generate(...).startswith(prompt)` cannot."""
    verse = "And God said, Let there be light: and there was light."
    words = verse.split()
    order = np.random.default_rng(0).permutation(len(words))
    shuffled = " ".join(words[i] for i in order)
    assert sorted(shuffled.split()) == sorted(words) and shuffled != verse
    model = presets("kjv_gpt")
    margin = log_likelihood(model, verse) - log_likelihood(model, shuffled)
    assert margin > 1.0, margin
    random = zoo.from_preset("kjv_gpt", load_weights=False)
    margin = log_likelihood(random, verse) - log_likelihood(random, shuffled)
    assert abs(margin) < 0.5, margin
    prompt = "And the LORD said unto Moses"
    text = model.generate(prompt, max_new_tokens=16)
    assert text.startswith(prompt) and len(text) > len(prompt)


def test_preset_labels_of_a_preset_without_class_names_raises():
    with pytest.raises(ValueError, match="class_names"):
        zoo.preset_labels("kjv_gpt")


def test_save_preset_writes_a_usage_doctest_that_runs(tmp_path):
    model = causal_lm(
        vocabulary_size=256,
        num_layers=1,
        num_heads=2,
        hidden_dim=16,
        intermediate_dim=32,
        max_sequence_length=32,
        tokenizer=keras_hub.tokenizers.ByteTokenizer(lowercase=False),
    )
    directory = zoo.save_preset(
        model,
        tmp_path / "tiny_gpt",
        "A test model.",
        "Tests only.",
        "None: random weights.",
        "pytest tests/zoo",
        usage='model.generate("Hi", max_new_tokens=3)',
    )
    card = (directory / "README.md").read_text()
    assert '>>> model = keras_tfm.zoo.from_preset("tiny_gpt")' in card
    expected = repr(model.generate("Hi", max_new_tokens=3))
    assert f'>>> model.generate("Hi", max_new_tokens=3)\n{expected}\n' in card
    with pytest.raises(ValueError, match="usage"):
        zoo.save_preset(
            model, tmp_path / "x", "d", "u", "t", "c", usage="a\nb", overwrite=True
        )

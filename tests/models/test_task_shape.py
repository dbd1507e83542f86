"""The Backbone/Task/Preprocessor shape, checked on the package itself.

One `generate` for both generating families; strings only in preprocessors
(no task overrides `__call__`, and `fit`, `evaluate` and `predict` are
written once, in `Task`, as keras-hub's `PipelineModel` does); the compiled
loops kept in one attribute with one `invalidate` hook.
"""

import ast
import inspect
from pathlib import Path

import keras
import pytest

import keras_tfm
from keras_tfm import models
from keras_tfm.generation import CompiledLoops
from tests.builders import causal_lm

PACKAGE = Path(keras_tfm.__file__).parent
MODEL_CLASSES = [
    cls
    for cls in vars(models).values()
    if inspect.isclass(cls) and issubclass(cls, keras.Model)
]
SMALL = dict(num_heads=2, hidden_dim=8, intermediate_dim=16, vocabulary_size=20)


def defined_functions(name):
    """The files (and classes) of the package that define a method `name`."""
    found = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, ast.FunctionDef) and item.name == name:
                        found.append(f"{path.relative_to(PACKAGE)}:{node.name}")
    return found


def test_generate_is_written_once_in_the_package():
    assert defined_functions("generate") == ["models/causal_lm.py:CausalLM"]


def test_no_model_class_but_task_defines_the_keras_entry_points():
    assert {cls.__name__ for cls in MODEL_CLASSES} >= {
        "CausalLM", "Seq2SeqLM", "EncoderClassifier", "SentenceEncoder",
        "MaskedLanguageModel", "DecoderBackbone", "Seq2SeqBackbone",
        "EncoderBackbone", "Task",
    }  # fmt: skip
    for cls in MODEL_CLASSES:
        for klass in cls.__mro__:
            if klass is models.Task or not klass.__module__.startswith("keras_tfm"):
                continue
            overridden = {"__call__", "fit", "evaluate", "predict"} & set(vars(klass))
            assert not overridden, f"{klass.__name__} overrides {overridden}"


def test_no_compiled_loop_cache_under_a_string_key():
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        assert "__dict__[" not in text and '__dict__.get("_' not in text, path


def test_from_preset_returns_the_class_asked_for_or_says_what_the_preset_is():
    for cls in (models.DecoderBackbone, models.Seq2SeqBackbone, models.CausalLM):
        assert callable(cls.from_preset)
    llm = models.CausalLM.from_preset("gpt_tiny")
    assert isinstance(llm, models.CausalLM)
    assert isinstance(
        models.DecoderBackbone.from_preset("gpt_tiny"), models.DecoderBackbone
    )
    translator = models.Seq2SeqLM.from_preset("transformer_tiny", dropout=0.0)
    assert translator.backbone.dropout == 0.0
    with pytest.raises(ValueError, match="is a CausalLM, not a Seq2SeqLM"):
        models.Seq2SeqLM.from_preset("gpt_tiny")


def test_quantize_and_lora_invalidate_the_compiled_loops():
    model = causal_lm(num_layers=1, max_sequence_length=16, **SMALL)
    assert isinstance(model.compiled_loops, CompiledLoops)
    model.generate([[1, 2, 3]], max_new_tokens=2)
    assert len(model.compiled_loops) == 1
    model.quantize("int8")
    assert len(model.compiled_loops) == 0
    # (A quantized model generates: tests/models/test_quantization.py.) The
    # hook drops whatever is kept, so a stand-in entry shows enable_lora's
    # call without compiling a second loop; that a loop traced before LoRA
    # then decodes with the adapters is tests/training/test_lora.py's
    # test_generation_compiled_before_uses_the_adapters_after.
    other = causal_lm(num_layers=1, max_sequence_length=16, **SMALL)
    other.compiled_loops.get(("stand-in",), object)
    keras_tfm.training.enable_lora(other, rank=2)
    assert len(other.compiled_loops) == 0


def test_loading_weights_invalidates_the_compiled_loops(tmp_path):
    model = causal_lm(num_layers=1, max_sequence_length=16, **SMALL)
    model.save_weights(tmp_path / "model.weights.h5")
    model.generate([[1, 2, 3]], max_new_tokens=2)
    model.load_weights(tmp_path / "model.weights.h5")
    assert len(model.compiled_loops) == 0


def test_the_translator_samples_with_the_users_settings_and_streams():
    # Issue 36's bug: Seq2SeqTransformer.generate(sampler="top_k") ignored the
    # user's top_k and sampled with k=5. With k=1 it must be greedy.
    translator = models.Seq2SeqLM.from_preset("translator_de_en")
    greedy = translator.generate("Ich habe einen Hund.", max_new_tokens=16)
    assert greedy == "I have a dog."
    top_1 = translator.generate(
        "Ich habe einen Hund.", max_new_tokens=16, sampler="top_k", top_k=1, seed=3
    )
    assert top_1 == greedy
    pieces = translator.generate("Ich habe einen Hund.", max_new_tokens=16, stream=True)
    assert "".join(pieces) == greedy

"""Presets on JAX without TensorFlow give TensorFlow's ids, texts and logits.

string_checks.py runs in a subprocess with `KERAS_BACKEND=jax` and every
import of TensorFlow refused (block_tensorflow.py): the tokenizers and
preprocessors take their Python path there. This process (TensorFlow
backend) runs the same tokenizers and preprocessors on their TensorFlow
path, inside `tf.data` and `tf.function`, which the subprocess must equal;
and every zoo preset on the same fixed input (preset_outputs.py), whose
outputs on the two backends must agree within float32 rounding.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import pytest

from keras_tfm import zoo
from tests.backends import preset_outputs
from tests.backends import string_cases as cases

tf = pytest.importorskip("tensorflow")
pytestmark = pytest.mark.skipif(
    keras.backend.backend() != "tensorflow", reason="compares JAX with TensorFlow"
)
HERE = Path(__file__).parent
NAMES = ("kjv_gpt", "fortunes_classifier", "translator_de_en", "all_minilm_l6_v2",
         "smollm2", "marian", "t5")  # fmt: skip


def lists(x):
    """Tensors (ragged too), arrays, tuples and dicts of them as JSON's lists."""

    def convert(t):
        if isinstance(t, tf.RaggedTensor):
            return t.to_list()
        return np.asarray(t).tolist()

    return json.loads(json.dumps(keras.tree.map_structure(convert, x)))


def tf_path(models, tokenizers):
    """What the TensorFlow path gives for `cases.TEXTS`."""
    texts = cases.TEXTS
    batch = tf.data.Dataset.from_tensor_slices(texts).batch(len(texts))
    out = {"ids": {}, "text": {}, "packed": {}}
    for name, tokenizer in tokenizers.items():
        ids = lists(next(iter(batch.map(tokenizer))))
        out["ids"][name] = ids
        ragged = tf.ragged.constant(ids, dtype="int32", ragged_rank=1)
        decoded = tf.function(tokenizer.detokenize)(ragged).numpy()
        out["text"][name] = [t.decode("utf-8") for t in decoded]
    pairs = tf.data.Dataset.from_tensor_slices((texts, texts[::-1])).batch(len(texts))
    for name, data in (
        ("kjv_gpt", batch),
        ("fortunes_classifier", batch),
        ("translator_de_en", pairs),
    ):
        out["packed"][name] = lists(next(iter(data.map(models[name].preprocessor))))
    encoder = models["all_minilm_l6_v2"]
    x = next(iter(batch.map(encoder.preprocessor)))
    out["embeddings"] = np.asarray(encoder(x))
    out["class"] = models["fortunes_classifier"].classify(cases.CLASSIFIED[0])
    out["generated"] = cases.generated(models)
    return out


@pytest.fixture(scope="module")
def results(tmp_path_factory, smollm2):
    """`(jax, tensorflow)`: the subprocess's answers and this process's
    (SmolLM2's logits from the session's model, loaded once)."""
    path = tmp_path_factory.mktemp("strings") / "jax.json"
    env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu")
    # The subprocess runs while this process computes its own answers.
    process = subprocess.Popen(
        [sys.executable, str(HERE / "string_checks.py"), str(path)], env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        models = cases.presets()
        expected = tf_path(models, cases.tokenizers(models))
        loaded = {**models, "smollm2_135m_instruct": smollm2}
        expected["outputs"] = preset_outputs.outputs(loaded)
        stdout, stderr = process.communicate(timeout=300)
    finally:
        process.kill()
    assert process.returncode == 0 and stdout.strip().endswith("ok"), (
        stdout[-2000:] + stderr[-4000:]
    )
    jax = json.loads(path.read_text("utf-8"))
    with np.load(path.with_suffix(".npz")) as arrays:
        jax["outputs"] = dict(arrays)
    return jax, expected


@pytest.mark.parametrize("name", NAMES)
def test_ids_equal_the_tensorflow_path(results, name):
    jax, expected = results
    assert jax["ids"][name] == expected["ids"][name]
    assert [] not in expected["ids"][name][:3]  # the texts did tokenize


@pytest.mark.parametrize("name", NAMES)
def test_detokenized_ids_equal_the_tensorflow_path(results, name):
    jax, expected = results
    assert jax["text"][name] == expected["text"][name]
    if name in cases.LOSSLESS:
        assert jax["text"][name] == cases.TEXTS
    else:  # ASCII comes back (WordPiece lowercases and splits off "."); "" too
        ascii = cases.TEXTS[0]
        assert jax["text"][name][0].replace(" .", ".") in (ascii, ascii.lower())
        assert jax["text"][name][-1] == ""


@pytest.mark.parametrize("name", ["kjv_gpt", "fortunes_classifier", "translator_de_en"])
def test_preprocessors_pack_as_in_tf_data(results, name):
    # CausalLMPreprocessor, TextClassifierPreprocessor, Seq2SeqLMPreprocessor.
    jax, expected = results
    assert jax["packed"][name] == expected["packed"][name]


def test_fortunes_classifier_classifies_on_jax(results):
    jax, expected = results
    text, label = cases.CLASSIFIED
    assert jax["class"] == expected["class"] == label, text


def test_sentence_embeddings_equal_tensorflow_within_float32_rounding(results):
    jax, expected = results
    got = np.asarray(jax["embeddings"], "float64")
    assert got.shape == expected["embeddings"].shape == (len(cases.TEXTS), 384)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-6)
    np.testing.assert_allclose(got, expected["embeddings"], rtol=0, atol=2e-6)


@pytest.mark.parametrize("name", [name for name, _, _ in cases.GENERATED])
def test_presets_generate_tensorflows_greedy_text_on_jax(results, name):
    jax, expected = results
    prompt = next(p for n, p, _ in cases.GENERATED if n == name)
    assert jax["generated"][name] == expected["generated"][name]
    assert len(expected["generated"][name]) > len(prompt) // 2  # it said something


# float32's unit roundoff: a correctly rounded operation's relative error.
ROUNDOFF = 2.0**-24
# The two backends run the same float32 graph with other kernels (TensorFlow's
# Eigen and oneDNN eagerly, XLA's compiled program on JAX): other summation
# orders, fusions and exp / erf / rsqrt approximations. A reduction of n terms
# in another order differs by about sqrt(n) ROUNDOFF of its terms' magnitude
# (a random walk of roundings; n <= 4,096 here: 64 ROUNDOFF); an output
# passes through at most ~60 such reductions one after another (SmolLM2: 30
# blocks, attention and feed-forward), whose independent differences add as
# a random walk too: sqrt(60) x 64 ~ 2^9 ROUNDOFF of the output's scale (its
# largest magnitude). Measured on the Intel Xeon: 36 ROUNDOFF for SmolLM2,
# 3-16 for the others. A real disagreement is far larger: one weight of
# kjv_gpt's 10M off by 0.01 (a quarter of a typical weight) moves its logits
# by 2,554 ROUNDOFF of their scale.
TOLERANCE = 2.0**9 * ROUNDOFF


@pytest.mark.parametrize("name", preset_outputs.compared())
def test_preset_outputs_equal_tensorflows_within_float32_rounding(results, name):
    jax, expected = results
    got, want = jax["outputs"][name], expected["outputs"][name]
    assert got.shape == want.shape and np.all(np.isfinite(want)), got.shape
    scale = np.max(np.abs(want))
    assert scale > 0.1, scale  # an output that says something
    np.testing.assert_allclose(got, want, rtol=0, atol=TOLERANCE * scale)


def test_every_preset_is_compared_or_has_a_compared_architecture():
    names = zoo.list_presets()
    compared = preset_outputs.compared()
    assert {"smollm2_135m_instruct", "all_minilm_l6_v2"} <= set(compared)
    families = {preset_outputs.architecture(n) for n in preset_outputs.ARCHITECTURES}
    for name in sorted(set(names) - set(compared)):
        # Random weights, and the options of a compared preset: only sizes differ.
        assert zoo.preset_weights(name) == "none", name
        assert preset_outputs.architecture(name) in families, name
    assert all(zoo.preset_weights(n) == "none" for n in preset_outputs.ARCHITECTURES)

"""Presets' strings on JAX without TensorFlow: run by the test of that name.

`python string_checks.py OUT.json` writes what the Python path gives for
string_cases.TEXTS: each tokenizer's ids and their detokenized text, each
preprocessor's packed ids, fortunes_classifier's class, the sentence
encoder's embeddings and two presets' greedy texts; and, in OUT.npz beside
it, every zoo preset's output on its fixed input (preset_outputs.py). The
test compares them to TensorFlow's. One process for both: JAX's import and
the presets' loading are paid once.
"""

import importlib
import json
import os
import sys

# First: every later import is checked.
sys.path.insert(0, os.path.dirname(__file__))
block_tensorflow = importlib.import_module("block_tensorflow")

import keras  # noqa: E402
import numpy as np  # noqa: E402

import keras_tfm  # noqa: E402, F401

cases = importlib.import_module("string_cases")
preset_outputs = importlib.import_module("preset_outputs")
assert keras.backend.backend() == "jax", keras.backend.backend()


def as_lists(x):
    """A backend tensor, NumPy array or nested list of ids as nested lists."""
    if isinstance(x, list | tuple):
        return [as_lists(row) for row in x]
    return np.asarray(keras.ops.convert_to_numpy(x)).tolist()


def main(path):
    models = cases.presets()
    out = {"ids": {}, "text": {}, "packed": {}}
    for name, tokenizer in cases.tokenizers(models).items():
        ids = as_lists(tokenizer(cases.TEXTS))
        out["ids"][name] = ids
        out["text"][name] = tokenizer.detokenize(ids)
    texts = cases.TEXTS
    for name, x in (
        ("kjv_gpt", texts),
        ("fortunes_classifier", texts),
        ("translator_de_en", (texts, texts[::-1])),
    ):
        packed = models[name].preprocessor(*((x,) if name != "translator_de_en" else x))
        out["packed"][name] = keras.tree.map_structure(as_lists, packed)
    text, _ = cases.CLASSIFIED
    out["class"] = models["fortunes_classifier"].classify(text)
    out["embeddings"] = models["all_minilm_l6_v2"].encode(texts).tolist()
    out["generated"] = cases.generated(models)
    with open(path, "w", encoding="utf-8") as file:
        json.dump(out, file, ensure_ascii=False)
    np.savez(os.path.splitext(path)[0] + ".npz", **preset_outputs.outputs(models))


main(sys.argv[1])
block_tensorflow.check_not_imported()
print("ok")

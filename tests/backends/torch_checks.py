"""Presets on PyTorch, no TensorFlow import from keras-tfm: run by test_on_torch.py.

`python torch_checks.py OUT.json` (with `KERAS_BACKEND=torch`) fits a
`CausalLM` on token ids, saves and reloads it, and writes what three presets
answer for string_cases' prompts: kjv_gpt's and translator_de_en's greedy
texts and fortunes_classifier's class. The test compares them with
TensorFlow's. Prints "ok".
"""

import importlib
import json
import os
import sys
import tempfile
import traceback


class TensorFlowImports:
    """Records the keras-tfm lines that import TensorFlow (they must be none).

    Not blocked as in the JAX checks: torch._dynamo probes
    `importlib.util.find_spec("tensorflow")`, which block_tensorflow.py's
    finder answers with an error, and keras-hub imports TensorFlow wherever
    it is installed; the keras-tfm callers are what this lane checks.
    """

    seen = []

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("tensorflow", "tensorflow_text"):
            frames = [
                f for f in traceback.extract_stack()[:-1]
                if "importlib" not in f.filename and "<frozen" not in f.filename
            ]  # fmt: skip
            if frames and "keras_tfm" in frames[-1].filename:
                self.seen.append(f"{frames[-1].filename}:{frames[-1].lineno}")
        return None


sys.meta_path.insert(0, TensorFlowImports())
sys.path.insert(0, os.path.dirname(__file__))

import keras  # noqa: E402
import numpy as np  # noqa: E402

from keras_tfm import zoo  # noqa: E402

cases = importlib.import_module("string_cases")
assert keras.backend.backend() == "torch", keras.backend.backend()


def fit_save_and_reload(folder):
    """gpt_tiny's loss falls on a repeated batch, and its reload is equal."""
    model = zoo.from_preset("gpt_tiny")
    ids = np.random.default_rng(0).integers(1, 60, (8, 17)).astype("int32")
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss=loss)
    history = model.fit(ids[:, :-1], ids[:, 1:], epochs=4, verbose=0)
    losses = history.history["loss"]
    assert losses[-1] < losses[0], losses
    path = os.path.join(folder, "gpt_tiny.keras")
    model.save(path)
    reloaded = keras.models.load_model(path)
    for a, b in zip(model.get_weights(), reloaded.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)
    row = model.generate([[5, 6, 7]], max_new_tokens=4)[0]
    assert reloaded.generate([[5, 6, 7]], max_new_tokens=4)[0] == row


def main(path):
    with tempfile.TemporaryDirectory() as folder:
        fit_save_and_reload(folder)
    models = {name: zoo.from_preset(name) for name, _, _ in cases.GENERATED}
    classifier = zoo.from_preset("fortunes_classifier")
    out = {
        "generated": cases.generated(models),
        "class": classifier.classify(cases.CLASSIFIED[0]),
    }
    with open(path, "w", encoding="utf-8") as file:
        json.dump(out, file, ensure_ascii=False)


main(sys.argv[1])
assert not TensorFlowImports.seen, TensorFlowImports.seen
print("ok")

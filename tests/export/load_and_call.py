"""Loads SavedModels with TensorFlow alone and calls their signatures.

Run as `python load_and_call.py requests.json answers.json` in a fresh
process. Keras, keras-hub and keras-tfm are made unimportable first
(TensorFlow 2.21 imports an installed Keras otherwise, and the
`tensorflow_text` package imports it for its Keras layers), so the
SavedModels load with TensorFlow and tensorflow-text's op libraries alone
(`tf.load_op_library`); the answer lists what was imported.
`requests.json` lists `{"directory", "signature", "inputs": {name: value}}`;
the answers are the signatures' outputs as lists, in the same order.
"""

import glob
import importlib.util
import json
import os
import sys

BLOCKED = ("keras", "keras_hub", "keras_tfm", "tf_keras")
for name in BLOCKED:
    sys.modules[name] = None  # `import keras` now raises ImportError

import tensorflow as tf  # noqa: E402

# Grappler off, as in the tests' own process (tests/conftest.py): it only
# rewrites each signature's graph for speed at its first call (-13 CPU-s).
tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": True})


def load_text_ops():
    """Registers tensorflow-text's kernels without importing its package."""
    root = importlib.util.find_spec("tensorflow_text").submodule_search_locations[0]
    for library in sorted(glob.glob(os.path.join(root, "python", "ops", "*.so"))):
        tf.load_op_library(library)


def plain(value):
    value = value.numpy()
    if value.dtype.kind in "SO":
        return [v.decode("utf-8") for v in value.reshape(-1)]
    return value.tolist()


def main(requests_path, answers_path):
    with open(requests_path, encoding="utf-8") as f:
        requests = json.load(f)
    load_text_ops()
    loaded, answers = {}, []
    for request in requests:
        directory = request["directory"]
        if directory not in loaded:
            loaded[directory] = tf.saved_model.load(directory)
        function = loaded[directory].signatures[request["signature"]]
        specs = function.structured_input_signature[1]  # JSON has no int64
        inputs = {
            name: tf.constant(value, specs[name].dtype)
            for name, value in request["inputs"].items()
        }
        answers.append({k: plain(v) for k, v in function(**inputs).items()})
    imported = sorted(
        name
        for name, module in sys.modules.items()
        if module is not None and name.split(".")[0] in BLOCKED + ("tensorflow_text",)
    )
    with open(answers_path, "w", encoding="utf-8") as f:
        json.dump({"answers": answers, "imported": imported}, f, ensure_ascii=False)


if __name__ == "__main__":
    main(*sys.argv[1:])

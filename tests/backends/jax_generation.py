"""`generate` on JAX without TensorFlow: run by test_generation_on_jax.py.

`python jax_generation.py WEIGHTS.npz OUT.json` loads the tiny model's
weights, writes every mode's outputs (`generation_cases.generated`) as JSON
and prints "ok".
"""

import importlib
import json
import os
import sys

# First: every later import is checked.
sys.path.insert(0, os.path.dirname(__file__))
block_tensorflow = importlib.import_module("block_tensorflow")

import generation_cases as cases  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402

assert keras.backend.backend() == "jax", keras.backend.backend()

model = cases.tiny_model()
weights = dict(np.load(sys.argv[1]))
model.set_weights([weights[f"w{i}"] for i in range(len(weights))])
with open(sys.argv[2], "w") as file:
    json.dump(cases.generated(model), file)


def weight_copies(model):
    """Arrays JAX holds equal to a weight but not the weight itself: a
    compiled loop that read a weight as a constant, not as its input."""
    import gc

    import jax

    gc.collect()
    own = {id(v.value) for v in model.weights}
    found = []
    for weight in model.weights:
        value = np.asarray(weight.value)
        if value.size < 2 or not value.any():
            continue
        found += [
            weight.path
            for array in jax.live_arrays()
            if id(array) not in own
            and array.shape == value.shape
            and array.dtype == value.dtype
            and np.array_equal(np.asarray(array), value)
        ]
    return found


copies = weight_copies(model)
assert not copies, f"the loops keep copies of {copies}"
block_tensorflow.check_not_imported()
print("ok")

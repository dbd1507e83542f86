"""Re-saves a preset's model.weights.h5 after a rename of model attributes.

Keras stores each weight under the path of attributes that leads to it, so
renaming `CausalLM.decoder_blocks` to `transformer_layers` (issue 14) moves
every block weight. This moves the stored arrays to their new paths inside
the file (their dtypes, e.g. float16 storage, unchanged), checks that the
preset's model loads the result, and replaces the file; run it once per
renamed preset and check that the outputs are unchanged.

Usage: python tools/remap_preset_weights.py PRESET OLD_PREFIX=NEW_PREFIX ...
"""

import shutil
import sys
import tempfile
from pathlib import Path

import h5py

import keras_tfm


def remap(name, renames):
    directory = keras_tfm.zoo.preset_dir(name)
    weights = directory / "model.weights.h5"
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "model.weights.h5"
        shutil.copy(weights, copy)
        with h5py.File(copy, "r+") as f:
            for old, new in renames:
                if new not in f:
                    f.move(old, new)
                    continue
                for child in list(f[old]):  # merge into the existing group
                    f.move(f"{old}/{child}", f"{new}/{child}")
                del f[old]
        model = keras_tfm.zoo.from_preset(name, load_weights=False)
        model.load_weights(copy)  # fails if any path is still unmatched
        shutil.copy(copy, weights)


if __name__ == "__main__":
    remap(sys.argv[1], [tuple(pair.split("=")) for pair in sys.argv[2:]])

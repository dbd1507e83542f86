"""Imported first by the JAX checks' subprocesses: any import of TensorFlow fails.

CI has TensorFlow installed, so its absence is simulated: a `sys.meta_path`
finder refuses `tensorflow`, `tensorflow_text` and `tf_keras` (keras-hub
tries them and carries on without), and `ATTEMPTS` lists which keras-tfm
module asked.
"""

import sys
import traceback

BLOCKED = ("tensorflow", "tensorflow_text", "tf_keras")
ATTEMPTS = []


class BlockTensorFlow:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] not in BLOCKED:
            return None
        callers = [
            frame
            for frame in traceback.extract_stack()[:-1]
            if "importlib" not in frame.filename and "<frozen" not in frame.filename
        ]
        if callers and "keras_tfm" in callers[-1].filename:
            ATTEMPTS.append(f"{callers[-1].filename}:{callers[-1].lineno}")
        raise ModuleNotFoundError(f"TensorFlow is blocked here: {name}", name=name)


sys.meta_path.insert(0, BlockTensorFlow())


def check_not_imported():
    """Fails if TensorFlow got in, or a keras-tfm module tried to import it."""
    loaded = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
    assert not loaded and not ATTEMPTS, (loaded, ATTEMPTS)

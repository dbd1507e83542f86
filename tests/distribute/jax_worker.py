"""One JAX training process for test_jax_data_parallel.py (run as a script).

    python jax_worker.py OUT.npz                  one process, whole batches
    python jax_worker.py OUT.npz ID N HOST:PORT   process ID of N processes
    python jax_worker.py OUT.npz ID N HOST:PORT SINGLE.npz
                                                  then, in the same process,
                                                  the one-process run too

Fits a tiny CausalLM (DecoderBackbone) on token ids, some labels padded,
for 4 steps of global batches of 8, without shuffling, and writes its
initial weights (from the same seed in every process) and its final ones.
With TensorFlow blocked: the JAX path must not need it.
"""

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "backends"))
import block_tensorflow  # noqa: E402  (first: TensorFlow is refused)
import keras  # noqa: E402
import numpy as np  # noqa: E402

from keras_tfm import distribute, models, training  # noqa: E402

OUT = sys.argv[1]
PROCESS_ID, NUM_PROCESSES, COORDINATOR, SINGLE_OUT = (sys.argv[2:] + [None] * 4)[:4]
NUM_EXAMPLES, GLOBAL_BATCH, LENGTH, VOCABULARY = 32, 8, 8, 32

assert keras.backend.backend() == "jax", keras.backend.backend()
rng = np.random.default_rng(7)
ids = rng.integers(1, VOCABULARY, size=(NUM_EXAMPLES, LENGTH + 1)).astype("int32")
ids[::3, -3:] = 0  # padding: real tokens per process differ


def train(out, distribution, num_processes, process_id=None):
    """Trains from seed 0 under `distribution` and writes `out`."""
    keras.distribution.set_distribution(distribution)
    x, y = (ids[:, :-1], ids[:, 1:])
    if process_id is not None:
        x, y = distribute.process_share((x, y), GLOBAL_BATCH)
    keras.utils.set_random_seed(0)
    model = models.CausalLM(
        models.DecoderBackbone(
            vocabulary_size=VOCABULARY,
            num_layers=1,
            num_heads=2,
            hidden_dim=16,
            intermediate_dim=32,
            max_sequence_length=LENGTH,
            dropout=0.0,
        )  # fmt: skip
    )
    model(ids[:2, :-1])  # builds it
    initial = model.get_weights()
    model.compile(
        optimizer=keras.optimizers.Adam(1e-2),
        loss=training.TokenCrossEntropy(ignore_class=0),
    )
    history = model.fit(
        x, y, batch_size=GLOBAL_BATCH // num_processes, epochs=1, shuffle=False,
        verbose=0,
    )  # fmt: skip
    np.savez(
        out,
        **{f"initial/{i}": w for i, w in enumerate(initial)},
        **{f"final/{i}": w for i, w in enumerate(model.get_weights())},
        replicas=1 if distribution is None else distribution.num_model_replicas,
        local_rows=len(x),
        loss=history.history["loss"][-1],
    )


num_processes = int(NUM_PROCESSES or 1)
process_id = None if PROCESS_ID is None else int(PROCESS_ID)
train(
    OUT,
    distribute.data_parallel(COORDINATOR, num_processes, process_id),
    num_processes,
    process_id,
)
if SINGLE_OUT:  # one JAX start for both runs: this process's device 0 alone
    train(SINGLE_OUT, None, 1)
block_tensorflow.check_not_imported()
print("ok", os.getpid())

"""Training on several devices or processes, on TensorFlow or on JAX.

TensorFlow: `strategy_from_flags` picks a `tf.distribute` strategy from a
flag or from `TF_CONFIG` (`MirroredStrategy`, `MultiWorkerMirroredStrategy`,
`TPUStrategy`); `shard_by_data` and `build_for_fit` prepare the data and the
model for `fit` under it; `is_chief` and `task_id` name this process.

JAX: `data_parallel` connects the processes and returns Keras's own
`keras.distribution.DataParallel`; `process_share` gives each process its
rows of every global batch of in-memory arrays. Neither imports TensorFlow.

See docs/distributed.md.

Example:
>>> distribution = keras_tfm.distribute.data_parallel()  # KERAS_BACKEND=jax
>>> keras.distribution.set_distribution(distribution)
"""

from keras_tfm.distribute.jax_data_parallel import data_parallel, process_share
from keras_tfm.distribute.strategy import (
    build_for_fit,
    is_chief,
    num_workers,
    shard_by_data,
    strategy_from_flags,
    task_id,
    tf_config,
)

__all__ = [
    "build_for_fit",
    "data_parallel",
    "is_chief",
    "num_workers",
    "process_share",
    "shard_by_data",
    "strategy_from_flags",
    "task_id",
    "tf_config",
]

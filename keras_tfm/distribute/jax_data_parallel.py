"""Data-parallel training on JAX with `keras.distribution`, over processes.

Keras provides the engine: `keras.distribution.initialize` connects the
processes (`jax.distributed`), and `keras.distribution.DataParallel` keeps a
copy of the weights on every device of every process and splits each global
batch along its first axis; the gradients are reduced inside the one compiled
train step (an XLA all-reduce; gloo between CPU processes). The loss is the
loss of the whole global batch, so a token-mean over padded labels is the
single-device mean (unlike `tf.distribute`'s per-replica average).
This module adds what keras-tfm's users need around it: a clear error on
another backend, the connection made only when there are several processes,
and `process_share`, which gives each process its rows of every global batch
of in-memory arrays (Keras shards only `tf.data` datasets, which need
TensorFlow). Nothing here imports TensorFlow. See docs/distributed.md.

Example (process 0 of two; process 1 runs the same with `process_id=1`):
>>> distribution = data_parallel("10.0.0.1:1234", num_processes=2, process_id=0)
>>> keras.distribution.set_distribution(distribution)  # before building
>>> model = keras_tfm.zoo.from_preset("gpt_nano")
>>> model.compile(optimizer="adam", loss=keras_tfm.training.TokenCrossEntropy())
>>> x, y = process_share((ids[:, :-1], ids[:, 1:]), global_batch_size=64)
>>> model.fit(x, y, batch_size=32, shuffle=False)  # 64 // 2 processes
"""

import os

import keras
import numpy as np


def data_parallel(
    coordinator_address=None, num_processes=None, process_id=None, devices=None
):
    """Connects the processes and returns a `keras.distribution.DataParallel`.

    Call it first in every process, before any JAX computation, then
    `keras.distribution.set_distribution(...)` (or `with distribution.scope()`)
    before building the model. Arguments left as None are read from
    `KERAS_DISTRIBUTION_JOB_ADDRESSES`, `KERAS_DISTRIBUTION_NUM_PROCESSES`
    and `KERAS_DISTRIBUTION_PROCESS_ID`, as `keras.distribution.initialize`
    reads them; one process (the default) connects nothing and spreads the
    batch over its own devices.

    Args:
        coordinator_address: "host:port" of process 0, which every process
            can reach.
        num_processes: how many processes train together.
        process_id: this process, from 0 to `num_processes - 1`.
        devices: the devices to use, e.g. `["cpu:0", "cpu:1"]` (default:
            `keras.distribution.list_devices()`, every device of every process).

    Returns:
        The `keras.distribution.DataParallel`. Its `auto_shard_dataset` is
        off: each process passes its own rows (`process_share`).

    Raises:
        ValueError: on a backend other than JAX, or for inconsistent process
            settings.
    """
    backend = keras.backend.backend()
    if backend != "jax":
        raise ValueError(
            "keras_tfm.distribute.data_parallel runs on the JAX backend "
            "(keras.distribution); set KERAS_BACKEND=jax before importing keras, "
            "or on TensorFlow use keras_tfm.distribute.strategy_from_flags "
            f"(tf.distribute). Received: backend={backend!r}"
        )
    env = os.environ
    if coordinator_address is None:
        coordinator_address = env.get("KERAS_DISTRIBUTION_JOB_ADDRESSES")
    if num_processes is None:
        num_processes = int(env.get("KERAS_DISTRIBUTION_NUM_PROCESSES", 1))
    if process_id is None and "KERAS_DISTRIBUTION_PROCESS_ID" in env:
        process_id = int(env["KERAS_DISTRIBUTION_PROCESS_ID"])
    if not (isinstance(num_processes, int) and num_processes >= 1):
        raise ValueError(
            f"`num_processes` must be a positive int. Received: {num_processes!r}"
        )
    if num_processes > 1:
        if not coordinator_address:
            raise ValueError(
                "Several processes need `coordinator_address` (or "
                "KERAS_DISTRIBUTION_JOB_ADDRESSES), the host:port of process 0. "
                f"Received: coordinator_address={coordinator_address!r}, "
                f"num_processes={num_processes}"
            )
        if not (isinstance(process_id, int) and 0 <= process_id < num_processes):
            raise ValueError(
                f"`process_id` must be an int in [0, {num_processes}). "
                f"Received: process_id={process_id!r}"
            )
        _use_cpu_collectives()
        keras.distribution.initialize(coordinator_address, num_processes, process_id)
    return keras.distribution.DataParallel(devices=devices, auto_shard_dataset=False)


def _use_cpu_collectives():
    """Gloo for all-reduces between CPU processes, where JAX has none chosen
    (JAX 0.10 chooses gloo itself; older versions default to "none", which
    leaves CPU processes unable to reduce)."""
    import jax

    if getattr(jax.config, "jax_cpu_collectives_implementation", "gloo") in (
        None,
        "none",
    ):
        jax.config.update("jax_cpu_collectives_implementation", "gloo")


def process_share(data, global_batch_size):
    """This process's rows of every global batch of `data`, in order.

    Every process holds the same arrays; global batch k is rows
    `[k * global_batch_size, (k + 1) * global_batch_size)`, and process p of
    P keeps its p-th P-th of each. Fit on the result with
    `batch_size=global_batch_size // P` and `shuffle=False` (or the same seed
    in every process), so that every process runs the same number of steps:
    a process with fewer would leave the others waiting in the all-reduce.

    Args:
        data: an array or a nested structure (tuple, dict) of arrays, all
            with the same number of rows.
        global_batch_size: the examples per step over all processes.

    Returns:
        `data`'s structure with this process's rows.

    Raises:
        ValueError: if the rows differ in number, or are not a whole number
            of global batches, or a global batch does not split evenly over
            the processes.
    """
    import jax  # the JAX backend's; not imported for TensorFlow users

    return _share(data, global_batch_size, jax.process_count(), jax.process_index())


def _share(data, global_batch_size, count, index):
    arrays = [np.asarray(a) for a in keras.tree.flatten(data)]
    rows = {len(a) for a in arrays}
    if len(rows) != 1:
        raise ValueError(
            "Every array of `data` must have the same number of rows. "
            f"Received: rows={sorted(rows)}"
        )
    (rows,) = rows
    if not (
        isinstance(global_batch_size, int)
        and global_batch_size > 0
        and global_batch_size % count == 0
    ):
        raise ValueError(
            f"`global_batch_size` must be a positive multiple of the {count} "
            f"processes. Received: global_batch_size={global_batch_size!r}"
        )
    if rows % global_batch_size:
        raise ValueError(
            f"`data` must hold a whole number of global batches, so that every "
            "process runs the same steps: drop or pad the last "
            f"{rows % global_batch_size} rows. Received: {rows} rows, "
            f"global_batch_size={global_batch_size}"
        )
    local = global_batch_size // count

    def share(array):
        array = np.asarray(array)
        steps = array.reshape(rows // global_batch_size, count, local, *array.shape[1:])
        return steps[:, index].reshape(-1, *array.shape[1:])

    return keras.tree.map_structure(share, data)

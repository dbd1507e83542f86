"""Choosing a `tf.distribute` strategy from a flag or from `TF_CONFIG`.

    "auto"          MultiWorkerMirroredStrategy when TF_CONFIG names more than
                    one task, else MirroredStrategy when there are several
                    GPUs, else the default (one-device) strategy
    "default"       one device
    "mirrored"      every local GPU (or the given devices), one process
    "multi_worker"  several processes/machines described by TF_CONFIG
    "tpu"           a TPU (Cloud TPU VM or a named TPU)

Build and compile the model inside `strategy.scope()`; `fit` then splits each
global batch across the replicas. Create the strategy before any other
TensorFlow work: a multi-worker strategy must be the first thing a process
does. See docs/distributed.md.

Example:
>>> strategy = strategy_from_flags("auto")
>>> with strategy.scope():
...     model = keras_tfm.zoo.from_preset("gpt_nano")
...     model.compile(optimizer="adam", loss=...)
>>> model.fit(dataset_of_global_batches)
"""

import contextlib
import json
import os

import keras

from keras_tfm._keras_compat import symbolic_build
from keras_tfm._optional import tensorflow as tf

STRATEGIES = ("auto", "default", "mirrored", "multi_worker", "tpu")


def tf_config():
    """The parsed `TF_CONFIG` environment variable, or None when unset.

    Raises:
        ValueError: if it is not JSON with a "cluster" and a "task".
    """
    text = os.environ.get("TF_CONFIG", "").strip()
    if not text:
        return None
    try:
        config = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(
            f"`TF_CONFIG` must be JSON. Received: TF_CONFIG={text[:200]!r} ({error})"
        ) from None
    cluster, task = (
        (config.get("cluster"), config.get("task"))
        if isinstance(config, dict)
        else (None, None)
    )
    if (
        not isinstance(cluster, dict)
        or not isinstance(task, dict)
        or task.get("type") not in cluster
        or not isinstance(task.get("index"), int)
        or not 0 <= task["index"] < len(cluster[task["type"]])
    ):
        raise ValueError(
            '`TF_CONFIG` must look like {"cluster": {"worker": ["host:port", ...]}, '
            '"task": {"type": "worker", "index": 0}} with the task in the cluster. '
            f"Received: TF_CONFIG={text[:200]!r}"
        )
    return config


def num_workers():
    """The number of training processes TF_CONFIG describes (1 without it)."""
    config = tf_config()
    if config is None:
        return 1
    return sum(len(config["cluster"].get(k, [])) for k in ("chief", "worker"))


def is_chief():
    """Whether this process writes the outputs (the model, the best checkpoint).

    The chief is task "chief", or worker 0 when the cluster has no chief;
    a process without TF_CONFIG is its own chief.
    """
    config = tf_config()
    if config is None:
        return True
    task = config["task"]
    if "chief" in config["cluster"]:
        return task["type"] == "chief"
    return task["type"] == "worker" and task["index"] == 0


def task_id():
    """ "chief", "worker-<i>", ... : a name for per-process files."""
    config = tf_config()
    if config is None:
        return "chief"
    task = config["task"]
    return "chief" if task["type"] == "chief" else f"{task['type']}-{task['index']}"


class OneDevice:
    """What `strategy_from_flags` gives on a backend other than TensorFlow:
    one device, Keras' own placement (the parts of `tf.distribute.Strategy`
    that keras-tfm's recipes use)."""

    num_replicas_in_sync = 1

    def scope(self):
        return contextlib.nullcontext()


def strategy_from_flags(strategy="auto", devices=None, tpu=None, timeout_seconds=600):
    """A `tf.distribute.Strategy` for `strategy` (see the module docstring).

    On another Keras backend, "auto" and "default" give `OneDevice()` and
    the others are refused (JAX shards with `keras_tfm.distribute.
    data_parallel`).

    Args:
        strategy: one of "auto", "default", "mirrored", "multi_worker", "tpu".
        devices: for "mirrored", e.g. ["/gpu:0", "/gpu:1"] (default: all GPUs).
        tpu: for "tpu", the TPU's name or address ("" or None: the local TPU VM).
        timeout_seconds: for "multi_worker", how long a collective may wait
            for the other workers before failing instead of hanging.

    Returns:
        The strategy.

    Raises:
        ValueError: for an unknown strategy, bad TF_CONFIG, or "multi_worker"
            without TF_CONFIG.
    """
    if strategy not in STRATEGIES:
        raise ValueError(
            f"`strategy` must be one of {STRATEGIES}. Received: strategy={strategy!r}"
        )
    if devices is not None and strategy != "mirrored":
        raise ValueError(
            "`devices` applies to strategy='mirrored' only. Received: "
            f"strategy={strategy!r}, devices={devices!r}"
        )
    if timeout_seconds is not None and not timeout_seconds > 0:
        raise ValueError(
            f"`timeout_seconds` must be positive. Received: {timeout_seconds!r}"
        )
    if keras.backend.backend() != "tensorflow":
        if strategy in ("auto", "default") and devices is None:
            return OneDevice()
        raise ValueError(
            f"strategy={strategy!r} is a tf.distribute strategy, which runs on "
            f"the TensorFlow backend; Keras runs on {keras.backend.backend()} "
            "here (set KERAS_BACKEND=tensorflow, or on JAX shard with "
            "keras_tfm.distribute.data_parallel)"
        )
    config = tf_config()
    if strategy == "auto":
        if config is not None and num_workers() > 1:
            strategy = "multi_worker"
        elif len(tf.config.list_logical_devices("GPU")) > 1:
            strategy = "mirrored"
        else:
            strategy = "default"
    if strategy == "default":
        return tf.distribute.get_strategy()
    if strategy == "mirrored":
        return tf.distribute.MirroredStrategy(devices)
    if strategy == "multi_worker":
        if config is None:
            raise ValueError(
                "strategy='multi_worker' needs the TF_CONFIG environment variable "
                "describing the cluster (see docs/distributed.md). Received: "
                "TF_CONFIG unset"
            )
        options = tf.distribute.experimental.CommunicationOptions(
            timeout_seconds=timeout_seconds
        )
        return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu or "")
    tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
    return tf.distribute.TPUStrategy(resolver)


def shard_by_data(dataset):
    """`dataset` with DATA auto-sharding: each worker keeps its share of
    every global batch (the right policy for in-memory data; FILE sharding
    needs one file per worker at least).
    """
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = (
        tf.data.experimental.AutoShardPolicy.DATA
    )
    return dataset.with_options(options)


def build_for_fit(model, batch):
    """Prepares a compiled `model` for `fit` under its strategy.

    Works around three bugs of Keras 3.15's `fit` under a strategy, both in
    `TensorFlowTrainer._maybe_symbolic_build`, which averages the first
    distributed batch over the replicas before building: the average turns
    integer token ids into floats, which the models rightly refuse
    (MirroredStrategy), and MultiWorkerMirroredStrategy cannot average a dict
    of inputs at all. Here the model is built on a plain batch instead, and
    that step is skipped for this model. Third, under MultiWorkerMirrored
    the per-step logs are averaged over the workers with `axis=0`, which
    fails on scalar logs (tensorflow/tensorflow#72388); the model's
    `train_step` and `test_step` then return their logs with shape (1,),
    whose average is the scalar Keras expects. Call it after
    `compile`, before `fit`.

    Args:
        model: a compiled Keras model.
        batch: `(x, y)` or `(x, y, sample_weight)`, e.g. `next(iter(dataset))`.
    """
    if keras.backend.backend() != "tensorflow":
        symbolic_build(model, batch)
        return
    with model.distribute_strategy.scope():
        symbolic_build(model, batch)
    if isinstance(model.distribute_strategy, tf.distribute.MultiWorkerMirroredStrategy):
        for name in ("train_step", "test_step"):
            setattr(model, name, _logs_as_vectors(getattr(model, name)))


def _logs_as_vectors(step):
    def wrapped(data):
        logs = step(data)
        return {
            key: tf.reshape(value, (1,)) if value.shape.rank == 0 else value
            for key, value in logs.items()
        }

    return wrapped

"""One training process for the distribution tests (run as a script).

    python worker.py MODE OUT.npz          MODE: single, mirrored, multi or
                                           single,mirrored (both, one after the
                                           other: OUT.single.npz, OUT.mirrored.npz)

Trains one small model of each zoo family for 2 epochs on 32 examples in
global batches of 8, the data order a function of the epoch only, and
writes every model's weights plus, per epoch, how many times each example
id went through a training step (summed over all replicas and workers by a
SUM-aggregated counter inside the model). "mirrored" splits the batch over
two logical CPU devices; "multi" over the workers of TF_CONFIG.
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ["KERAS_BACKEND"] = "tensorflow"

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

MODES, OUT = sys.argv[1].split(","), sys.argv[2]
if "mirrored" in MODES:  # before TensorFlow initialises its devices
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * 2
    )

from keras_tfm import distribute  # noqa: E402


def strategy_of(mode):
    if mode == "mirrored":
        return distribute.strategy_from_flags(
            "mirrored", devices=["/cpu:0", "/cpu:1"]
        )
    if mode == "multi":
        strategy = distribute.strategy_from_flags("auto", timeout_seconds=60)
        assert isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)
        return strategy
    return distribute.strategy_from_flags("default")


import keras  # noqa: E402

keras.config.disable_traceback_filtering()

from keras_tfm import training, zoo  # noqa: E402
from keras_tfm.models import EncoderClassifier  # noqa: E402

NUM_EXAMPLES, GLOBAL_BATCH, EPOCHS, LENGTH = 32, 8, 2, 8


class Counted(keras.Model):
    """Runs `inner` on inputs["x"], counting inputs["example_id"] in training."""

    def __init__(self, inner, **kwargs):
        super().__init__(**kwargs)
        self.inner = inner
        # Each replica counts its own examples; reading sums the replicas
        # (and, under MultiWorkerMirroredStrategy, the workers).
        self.seen = tf.Variable(
            tf.zeros(NUM_EXAMPLES),
            trainable=False,
            synchronization=tf.VariableSynchronization.ON_READ,
            aggregation=tf.VariableAggregation.SUM,
            name="seen",
        )

    def call(self, inputs, training=None):
        if training:
            ids = keras.ops.one_hot(inputs["example_id"], NUM_EXAMPLES)
            self.seen.assign_add(keras.ops.sum(ids, axis=0))
        return self.inner(inputs["x"], training=training)


class RecordSeen(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.per_epoch = []

    def on_epoch_end(self, epoch, logs=None):
        seen = self.model.seen
        self.per_epoch.append(seen.read_value().numpy())
        for copy in getattr(seen, "values", [seen]):
            copy.assign(tf.zeros_like(copy))


def arrays(family):
    rng = np.random.default_rng(7)
    ids = rng.integers(1, 64, size=(NUM_EXAMPLES, LENGTH + 1)).astype("int32")
    if family == "classifier":
        ids[::3, -3:] = 0  # some padding
    # No padding in the language-model labels: a token-mean loss that skips
    # padding is averaged per replica, so with unequal numbers of real tokens
    # per replica it differs (slightly) from the single-device mean; see
    # docs/distributed.md.
    if family == "causal":
        x, y = ids[:, :-1], ids[:, 1:]
    elif family == "seq2seq":
        x = {"source_ids": ids[:, 1:], "target_ids": ids[:, :-1]}
        y = ids[:, 1:]
    else:
        x, y = ids[:, :-1], (ids[:, 1] % 3).astype("int32")
    return {"x": x, "example_id": np.arange(NUM_EXAMPLES, dtype="int32")}, y


def data(family):
    x, y = arrays(family)
    # The order is a function of the epoch only (as in `keras-tfm train`),
    # drawn with NumPy: tf.data's shuffle is reseeded when a strategy
    # rewrites the dataset for distribution, which changes the batches.
    order = np.concatenate(
        [np.random.default_rng([7, e]).permutation(NUM_EXAMPLES) for e in range(EPOCHS)]
    )
    stream = tf.data.Dataset.from_tensor_slices(
        keras.tree.map_structure(lambda a: a[order], (x, y))
    )
    return distribute.shard_by_data(stream.batch(GLOBAL_BATCH))


def build(family):
    if family == "causal":
        inner = zoo.from_preset(
            "gpt_nano", num_layers=1, hidden_dim=16, intermediate_dim=32,
            num_heads=2, vocabulary_size=64, max_sequence_length=LENGTH,
            dropout=0.0,
        )  # fmt: skip
        loss = training.TokenCrossEntropy()
    elif family == "seq2seq":
        inner = zoo.from_preset("transformer_tiny", max_sequence_length=LENGTH)
        loss = training.TokenCrossEntropy()
    else:
        inner = EncoderClassifier(
            backbone=zoo.from_preset("bert_tiny_test"), num_classes=3
        )
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    model = Counted(inner)
    x, _ = arrays(family)
    model(keras.tree.map_structure(lambda a: a[:2], x))  # builds it
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss=loss, jit_compile=False)
    return model


def train(strategy):
    """Every family's weights and per-epoch counts, trained under `strategy`."""
    results = {}
    for family in os.environ.get("FAMILIES", "causal,seq2seq,classifier").split(","):
        keras.utils.set_random_seed(0)
        with strategy.scope():
            model = build(family)
        distribute.build_for_fit(model, next(iter(data(family))))
        record = RecordSeen()
        model.fit(
            data(family),
            epochs=EPOCHS,
            steps_per_epoch=NUM_EXAMPLES // GLOBAL_BATCH,
            callbacks=[record],
            shuffle=False,  # the dataset is ordered per epoch
            verbose=0,
        )
        for i, weight in enumerate(model.inner.weights):
            results[f"{family}/weight_{i}"] = keras.ops.convert_to_numpy(weight)
        results[f"{family}/seen"] = np.stack(record.per_epoch)
    results["replicas"] = np.array(strategy.num_replicas_in_sync)
    return results


# Several modes in one process share one TensorFlow start (seconds each).
for mode in MODES:
    out = OUT if len(MODES) == 1 else OUT.replace(".npz", f".{mode}.npz")
    results = train(strategy_of(mode))
    if distribute.is_chief():
        np.savez(out, **results)
    else:  # every worker reports, so that the test can compare them
        np.savez(out.replace(".npz", f".{distribute.task_id()}.npz"), **results)

"""The language-model training recipe of `keras-tfm train` and the examples.

    lr(step) = lr * step / warmup                       for step < warmup
             = cosine decay from lr to lr * final_learning_rate_fraction
    optimizer: AdamW(lr(step), weight_decay); loss: TokenCrossEntropy

The training windows are read in an order that is a function of `(seed,
pass)` only, so that a run killed mid-epoch and restarted from its backup
(`keras_tfm.saving.ResumableBackupAndRestore`) sees the same batches and ends
with the weights of an uninterrupted run.
"""

import contextlib
import math

import keras
import numpy as np

from keras_tfm._optional import tensorflow as tf
from keras_tfm.distribute import build_for_fit, shard_by_data
from keras_tfm.saving import ResumableBackupAndRestore
from keras_tfm.training.callbacks import ProgressBar
from keras_tfm.training.token_accuracy import TokenAccuracy
from keras_tfm.training.token_cross_entropy import TokenCrossEntropy
from keras_tfm.validation import check_positive_float, check_positive_int


def next_token_pairs(windows):
    """A `tf.data.Dataset` of `(w[:-1], w[1:])` pairs, one per token window
    (on another Keras backend, `TokenPairs`: the same pairs without
    TensorFlow).

    Args:
        windows: an int array (num_windows, sequence_length + 1), e.g. from
            `keras_tfm.data.next_token_windows`.

    Example:
    >>> x, y = next(iter(next_token_pairs([[1, 2, 3], [4, 5, 6]])))
    >>> x.numpy().tolist(), y.numpy().tolist()
    ([1, 2], [2, 3])
    """
    if keras.backend.backend() != "tensorflow":
        return TokenPairs(windows)
    windows = tf.data.Dataset.from_tensor_slices(tf.constant(windows, tf.int32))
    return windows.map(lambda window: (window[:-1], window[1:]))


class TokenPairs:
    """`next_token_pairs` without TensorFlow: the windows, batched by
    `batch(batch_size)` into a `keras.utils.PyDataset` of `(w[:-1], w[1:])`."""

    def __init__(self, windows):
        self.windows = np.asarray(windows, "int32")

    def __len__(self):
        return len(self.windows)

    def batch(self, batch_size, order=None):
        """The batches in order (`order`: the windows' indices, batch by batch)."""
        if order is None:
            order = [
                np.arange(i, min(i + batch_size, len(self)))
                for i in range(0, len(self), batch_size)
            ]
        return _WindowBatches(self.windows, order)


class _WindowBatches(keras.utils.PyDataset):
    def __init__(self, windows, order):
        super().__init__()
        self.windows, self.order = windows, order

    def __len__(self):
        return len(self.order)

    def __getitem__(self, index):
        windows = self.windows[self.order[index]]
        return windows[:, :-1], windows[:, 1:]


def _count(dataset):
    if isinstance(dataset, TokenPairs):
        return len(dataset)
    count = int(dataset.cardinality())
    if count < 0:  # unknown: count by reading it once
        count = int(dataset.reduce(0, lambda total, _: total + 1))
    return count


def _stream(examples, count, batch_size, seed, start, stop, steps_per_pass):
    """Batches [start, stop) of the concatenated passes over `examples`; pass
    p is shuffled with a seed that is a function of (seed, p) only."""
    first, last = start // steps_per_pass, math.ceil(stop / steps_per_pass)
    if isinstance(examples, TokenPairs):  # NumPy's shuffles, the same rule
        order = []
        for p in range(first, last):
            shuffled = np.random.default_rng(seed * 1_000_003 + p).permutation(count)
            order += [shuffled[i : i + batch_size] for i in range(0, count, batch_size)]
        skip = start - first * steps_per_pass
        return examples.batch(batch_size, order[skip : skip + stop - start])
    passes = [
        examples.shuffle(
            count, seed=seed * 1_000_003 + p, reshuffle_each_iteration=False
        ).batch(batch_size)
        for p in range(first, last)
    ]
    stream = passes[0]
    for batches in passes[1:]:
        stream = stream.concatenate(batches)
    stream = stream.skip(start - first * steps_per_pass).take(stop - start)
    return shard_by_data(stream.prefetch(tf.data.AUTOTUNE))


def train_language_model(
    model,
    train_examples,
    validation_data,
    *,
    epochs,
    batch_size,
    learning_rate,
    steps_per_epoch=None,
    warmup_steps=None,
    final_learning_rate_fraction=0.1,
    weight_decay=0.01,
    ignore_class=None,
    jit_compile=False,
    seed=0,
    callbacks=(),
    backup_dir=None,
    save_freq="epoch",
    verbose=2,
):
    """Compiles and fits a causal language model; resumes from a backup.

    The windows are read pass after pass, each pass in its own shuffled order
    (see the module docstring); an epoch is `steps_per_epoch` batches (by
    default one pass). With `backup_dir`, the model and its optimizer are
    backed up every `save_freq`, and a run started again with the same
    arguments continues from the last backup, mid-epoch included. Call
    `keras.utils.set_random_seed(seed)` first for reproducible weights.

    Args:
        model: a causal LM taking `(batch, seq)` token ids, built under the
            strategy it is to be trained with.
        train_examples: a `tf.data.Dataset` of `(inputs, labels)` examples
            (not batches) in a fixed order, e.g. `next_token_pairs(windows)`
            (on another backend its `TokenPairs`).
        validation_data: `(inputs, labels)` batches (a `tf.data.Dataset`, or
            a `keras.utils.PyDataset` such as `TokenPairs(...).batch(n)`),
            evaluated after every epoch.
        epochs: the number of epochs.
        batch_size: examples per batch.
        learning_rate: the peak learning rate, after the warm-up.
        steps_per_epoch: batches per epoch (default: one pass over the data).
        warmup_steps: linear warm-up steps (default: a tenth of all steps).
        final_learning_rate_fraction: where the cosine decay ends, as a
            fraction of `learning_rate`.
        weight_decay: AdamW's decoupled weight decay.
        ignore_class: a label id left out of the loss and accuracy (padding),
            or None to score every label.
        jit_compile: compile the steps with XLA.
        seed: the seed of the windows' order.
        callbacks: more Keras callbacks (e.g. `ThroughputCallback`).
        backup_dir: a folder for the resumable backup, or None.
        save_freq: "epoch" or a number of steps between backups.
        verbose: Keras' `fit` verbosity.

    Returns:
        The `History` of the last `fit` call, or None if a backup showed
        that the training had already finished.

    Example:
    >>> # Tokens 1..8 over and over: each follows from the one before, while
    >>> # their frequencies alone leave ln 8 = 2.08 nats a token.
    >>> keras.utils.set_random_seed(0)
    >>> model = keras_tfm.zoo.from_preset("gpt_tiny", vocabulary_size=9)
    >>> windows = np.tile(np.arange(1, 9), 41)[: 36 * 9].reshape(36, 9)
    >>> history = train_language_model(
    ...     model, next_token_pairs(windows[:32]),
    ...     next_token_pairs(windows[32:]).batch(4),
    ...     epochs=20, batch_size=4, learning_rate=1e-2, verbose=0)
    >>> losses = history.history["val_loss"]
    >>> bool(losses.pop() < 0.5 * np.log(8))
    True
    """
    check_positive_int("epochs", epochs)
    check_positive_int("batch_size", batch_size)
    check_positive_float("learning_rate", learning_rate)
    count = _count(train_examples)
    if count == 0:
        raise ValueError("`train_examples` is empty. Received: 0 examples")
    steps_per_pass = math.ceil(count / batch_size)
    steps_per_epoch = steps_per_epoch or steps_per_pass
    check_positive_int("steps_per_epoch", steps_per_epoch)
    steps = epochs * steps_per_epoch
    warmup_steps = steps // 10 if warmup_steps is None else warmup_steps
    schedule = keras.optimizers.schedules.CosineDecay(
        0.0,
        decay_steps=max(1, steps - warmup_steps),
        warmup_target=learning_rate,
        warmup_steps=warmup_steps,
        alpha=final_learning_rate_fraction,
    )
    strategy = getattr(model, "distribute_strategy", None)  # TensorFlow's only
    with contextlib.nullcontext() if strategy is None else strategy.scope():
        model.compile(
            optimizer=keras.optimizers.AdamW(schedule, weight_decay=weight_decay),
            loss=TokenCrossEntropy(ignore_class=ignore_class),
            metrics=[TokenAccuracy(ignore_class=ignore_class)],
            jit_compile=jit_compile,
        )

    def stream(start, stop):
        return _stream(
            train_examples, count, batch_size, seed, start, stop, steps_per_pass
        )

    build_for_fit(model, next(iter(stream(0, 1))))
    callbacks = list(callbacks)
    if not any(isinstance(c, keras.callbacks.ProgbarLogger) for c in callbacks):
        callbacks.append(ProgressBar())  # tokens/s and MFU: ThroughputCallback's line
    done = 0
    if backup_dir is not None:
        backup = ResumableBackupAndRestore(str(backup_dir), save_freq=save_freq)
        done = backup.restore(model)
        callbacks.append(backup)
        if done:
            print(f"Resuming from {backup_dir} at step {done} of {steps}.")
    epoch, skip = divmod(done, steps_per_epoch)
    fit = dict(
        validation_data=validation_data,
        callbacks=callbacks,
        shuffle=False,  # the stream is ordered
        verbose=verbose,
    )
    history = None
    if skip:  # finish the interrupted epoch first
        history = model.fit(
            stream(done, (epoch + 1) * steps_per_epoch),
            initial_epoch=epoch,
            epochs=epoch + 1,
            steps_per_epoch=steps_per_epoch - skip,
            **fit,
        )
        epoch += 1
    if epoch < epochs and not getattr(model, "stop_training", False):
        history = model.fit(
            stream(epoch * steps_per_epoch, steps),
            initial_epoch=epoch,
            epochs=epochs,
            steps_per_epoch=steps_per_epoch,
            **fit,
        )
    return history

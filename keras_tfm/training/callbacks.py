"""Callbacks of the language-model training recipe (`train_language_model`).

`BestModelCheckpoint` keeps the model of the lowest validation loss so far,
across restarts; `TimeBudget` stops training at the first epoch end past a
time budget. (`ThroughputCallback`, tokens/s and MFU, has its own module.)

Example:
>>> callbacks = [BestModelCheckpoint("/tmp/run"), TimeBudget(minutes=60)]
>>> model.fit(data, epochs=10, validation_data=held_out, callbacks=callbacks)
"""

import json
import math
import time
from pathlib import Path

import keras

from keras_tfm.saving import atomic_save, atomic_write_text
from keras_tfm.validation import check_positive_float


class BestModelCheckpoint(keras.callbacks.Callback):
    """Keeps `<directory>/best.keras`, the lowest `val_loss` so far.

    The best value is kept beside it in `best.json` (`{"val_loss", "epoch"}`),
    so that a restarted run only replaces the file with a better model.
    Writes are atomic (`keras_tfm.saving.atomic_save`).

    Args:
        directory: the folder of `best.keras` and `best.json`.
        enabled: False writes nothing (e.g. on a worker that is not the
            chief of a multi-worker run).

    Example:
    >>> best = BestModelCheckpoint("/tmp/run")
    >>> model.fit(data, validation_data=held_out, callbacks=[best])
    >>> best.best            # the lowest validation loss seen, or inf
    """

    def __init__(self, directory, enabled=True):
        super().__init__()
        self.path = Path(directory) / "best.keras"
        self.record = Path(directory) / "best.json"
        self.enabled = enabled
        self.best = math.inf
        if self.record.is_file():
            self.best = json.loads(self.record.read_text())["val_loss"]

    def on_epoch_end(self, epoch, logs=None):
        loss = (logs or {}).get("val_loss")
        if not self.enabled or loss is None or not loss < self.best:
            return
        self.best = float(loss)
        atomic_save(self.model, self.path)
        record = {"val_loss": self.best, "epoch": epoch + 1}
        atomic_write_text(self.record, json.dumps(record))


class TimeBudget(keras.callbacks.Callback):
    """Stops training at the end of the first epoch past `minutes`.

    Args:
        minutes: the budget, a positive number, or None (never stop).

    Example:
    >>> model.fit(data, epochs=100, callbacks=[TimeBudget(minutes=60)])
    """

    def __init__(self, minutes=None):
        super().__init__()
        if minutes is not None:
            check_positive_float("minutes", minutes)
        self.minutes = minutes
        self.epochs = 0

    def on_train_begin(self, logs=None):
        self.began = time.time()

    def on_epoch_end(self, epoch, logs=None):
        self.epochs = epoch + 1
        if self.minutes and time.time() - self.began > 60 * self.minutes:
            print(f"Time budget of {self.minutes} min reached after {epoch + 1} epochs")
            self.model.stop_training = True


class ProgressBar(keras.callbacks.ProgbarLogger):
    """Keras' progress bar without the logs it would print as raw floats.

    Keras prints every log value with four decimals (`tokens_per_second:
    8730.9731 - mfu: 0.2648`); `ThroughputCallback` prints those two on its
    own line, formatted ("8,731 tokens/s (all tokens), MFU 26.48% of ...").
    They stay in the logs and in `History`.
    """

    HIDDEN = ("tokens_per_second", "mfu")

    def _shown(self, logs):
        return {k: v for k, v in (logs or {}).items() if k not in self.HIDDEN}

    def _update_progbar(self, batch, logs=None):
        super()._update_progbar(batch, self._shown(logs))

    def _finalize_progbar(self, logs):
        super()._finalize_progbar(self._shown(logs))

"""Training survives SIGKILL: resumed runs end with the uninterrupted weights,
and a crash while saving never destroys the previous file."""

import contextlib
import io
import os
import signal
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest

from keras_tfm import cli
from keras_tfm.datasets import load_default_corpus
from tests.builders import causal_lm
from tests.conftest import graph_optimizer_as_in_a_fresh_process

TIMEOUT = 600  # the machine may be shared; a hang still ends
KILL_AT, BACKUP_STEP = 7, 6

# Runs `keras-tfm train`; with KILL_AT_STEP it SIGKILLs itself right after
# that global step, in the middle of an epoch, as a crash or preemption would.
RUNNER = textwrap.dedent(
    """
    import os, signal, sys
    import keras
    from keras_tfm import cli, training

    kill_at = int(os.environ.get("KILL_AT_STEP", "0"))
    original = training.ThroughputCallback.on_train_batch_end

    def on_train_batch_end(self, batch, logs=None):
        original(self, batch, logs)
        step = int(keras.ops.convert_to_numpy(self.model.optimizer.iterations))
        if step == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)

    training.ThroughputCallback.on_train_batch_end = on_train_batch_end
    cli.main(sys.argv[1:])
    """
)


def training_args(folder):
    corpus = folder.parent / "corpus.txt"
    if not corpus.exists():
        corpus.write_text(load_default_corpus()[:1_200], encoding="utf-8")
    return [
        "train", "--data", str(corpus), "--preset", "gpt_nano", "--epochs", "2",
        "--batch-size", "8", "--sequence-length", "32", "--no-jit",
        "--save-freq", "3", "--output", str(folder / "model.keras"),
        "--no-samples", "--peak-flops", "1e11", "--learning-rate", "1e-2",
        "--vocabulary-size", "256", "--dropout", "0",  # dropout draws differ on resume
    ]  # fmt: skip


def run_training(folder, kill_at=0):
    args = training_args(folder)
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "KILL_AT_STEP": str(kill_at)}
    env.pop("TF_CONFIG", None)
    return subprocess.Popen(
        [sys.executable, "-c", RUNNER, *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def wait(process):
    try:
        output, _ = process.communicate(timeout=TIMEOUT)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()  # reaps it and closes its pipe
    return process.returncode, output


@pytest.mark.slow
def test_sigkill_mid_epoch_then_resume_equals_uninterrupted(tmp_path):
    # 1,200 bytes, 1,080 of them for training (bytes: --vocabulary-size 256)
    # -> 32 windows of 33 -> 4 steps an epoch
    # in batches of 8. Backups every 3 steps land at steps 3 and 6; the kill
    # after step 7 loses step 7, and the rerun resumes at step 6: epoch 2,
    # its first 2 batches skipped.
    straight, interrupted = tmp_path / "straight", tmp_path / "interrupted"
    straight.mkdir()
    interrupted.mkdir()
    killed = run_training(interrupted, kill_at=KILL_AT)
    code, output = wait(killed)
    assert code == -signal.SIGKILL, output[-3000:]
    assert not (interrupted / "model.keras").exists()
    backups = list((interrupted / "model.keras.checkpoints").glob("backup-*"))
    assert backups, output[-3000:]
    code, output = wait(run_training(interrupted))
    assert code == 0, output[-3000:]
    assert f"at step {BACKUP_STEP}" in output, output[-3000:]
    assert ">>> " not in output  # --no-samples
    # The uninterrupted run, in this process (a fresh one costs a TensorFlow
    # import; the killed and the resumed runs must be fresh processes).
    with graph_optimizer_as_in_a_fresh_process():
        with contextlib.redirect_stdout(io.StringIO()):
            cli.main(training_args(straight))
    resumed = keras.saving.load_model(interrupted / "model.keras")
    reference = keras.saving.load_model(straight / "model.keras")
    for a, b in zip(resumed.weights, reference.weights, strict=True):
        np.testing.assert_allclose(
            keras.ops.convert_to_numpy(a), keras.ops.convert_to_numpy(b), atol=1e-6
        )
    # The backup is removed after a finished run; the best model is kept.
    assert not list((interrupted / "model.keras.checkpoints").glob("backup-*"))
    assert (interrupted / "model.keras.checkpoints" / "best.keras").is_file()


def tiny_lm():

    model = causal_lm(
        vocabulary_size=20, num_layers=1, num_heads=2, hidden_dim=8,
        intermediate_dim=16, max_sequence_length=8,
    )  # fmt: skip
    model(np.ones((1, 4), "int32"))
    return model


@pytest.mark.parametrize("name", ["model.keras", "model.weights.h5"])
def test_a_crash_while_saving_keeps_the_previous_file(tmp_path, name, monkeypatch):
    from keras_tfm import saving

    path = tmp_path / name
    model = tiny_lm()
    saving.atomic_save(model, path)
    good = path.read_bytes()
    method = "save" if name.endswith(".keras") else "save_weights"
    real = getattr(type(model), method)

    def crash_midway(self, filepath, **kwargs):
        real(self, filepath, **kwargs)
        with open(filepath, "r+b") as f:  # half written, then the crash
            f.truncate(len(good) // 2)
        raise OSError("disk full")

    monkeypatch.setattr(type(model), method, crash_midway)
    with pytest.raises(OSError, match="disk full"):
        saving.atomic_save(model, path)
    assert path.read_bytes() == good
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]  # no leftovers
    # Saving in place, as before, would have destroyed it.
    with pytest.raises(OSError, match="disk full"):
        getattr(model, method)(str(path), overwrite=True)
    assert path.read_bytes() != good


def test_resumable_backup_writes_the_global_step(tmp_path):
    import json

    import keras

    from keras_tfm import saving

    model = tiny_lm()
    model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
    backup = saving.ResumableBackupAndRestore(str(tmp_path / "b"), save_freq=2)
    ids = np.ones((8, 4), "int32")
    model.fit(ids, ids, batch_size=2, epochs=1, callbacks=[backup], verbose=0)
    metadata = json.loads((tmp_path / "b" / "training_metadata.json").read_text())
    assert metadata["step"] == 4
    fresh = tiny_lm()
    fresh.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
    assert saving.ResumableBackupAndRestore(str(tmp_path / "b")).restore(fresh) == 4
    for a, b in zip(fresh.weights, model.weights, strict=True):
        np.testing.assert_array_equal(
            keras.ops.convert_to_numpy(a), keras.ops.convert_to_numpy(b)
        )

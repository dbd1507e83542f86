"""Training survives SIGKILL: resumed runs end with the uninterrupted weights,
and a crash while saving never destroys the previous file."""

import os
import signal
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest

from keras_tfm.data import load_default_corpus

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


def run_training(folder, kill_at=0):
    corpus = folder.parent / "corpus.txt"
    if not corpus.exists():
        corpus.write_text(load_default_corpus()[:1_200], encoding="utf-8")
    args = [
        "train", "--data", str(corpus), "--preset", "gpt_nano", "--epochs", "2",
        "--batch-size", "8", "--sequence-length", "32", "--no-jit",
        "--save-freq", "3", "--output", str(folder / "model.keras"),
        "--max-new-tokens", "1", "--prompt", "A", "--learning-rate", "1e-2",
    ]  # fmt: skip
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
    # 1,200 bytes -> 36 windows of 33 -> 32 for training -> 4 steps an epoch
    # in batches of 8. Backups every 3 steps land at steps 3 and 6; the kill
    # after step 7 loses step 7, and the rerun resumes at step 6: epoch 2,
    # its first 2 batches skipped.
    straight, interrupted = tmp_path / "straight", tmp_path / "interrupted"
    straight.mkdir()
    interrupted.mkdir()
    first = run_training(straight)
    killed = run_training(interrupted, kill_at=KILL_AT)
    code, output = wait(killed)
    assert code == -signal.SIGKILL, output[-3000:]
    assert not (interrupted / "model.keras").exists()
    backups = list((interrupted / "model.keras.checkpoints").glob("backup-*"))
    assert backups, output[-3000:]
    code, output = wait(run_training(interrupted))
    assert code == 0, output[-3000:]
    assert f"at step {BACKUP_STEP}" in output, output[-3000:]
    code, reference_output = wait(first)
    assert code == 0, reference_output[-3000:]
    resumed = keras.saving.load_model(interrupted / "model.keras")
    reference = keras.saving.load_model(straight / "model.keras")
    for a, b in zip(resumed.weights, reference.weights, strict=True):
        np.testing.assert_allclose(
            keras.ops.convert_to_numpy(a), keras.ops.convert_to_numpy(b), atol=1e-6
        )
    # The backup is removed after a finished run; the best model is kept.
    assert not list((interrupted / "model.keras.checkpoints").glob("backup-*"))
    assert (interrupted / "model.keras.checkpoints" / "best.keras").is_file()

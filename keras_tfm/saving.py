"""Crash-safe saving: write to a temporary file, then rename it into place.

A process killed while `model.save(path)` runs leaves a truncated file where
a good one stood. `atomic_save` writes beside the target first and moves the
finished file over it with `os.replace`, which is atomic on POSIX and
Windows: a reader sees the old file or the new one, never half of one.

Example:
>>> model = keras_tfm.models.CausalLM(keras_tfm.models.DecoderBackbone(
...     vocabulary_size=50, num_layers=1, num_heads=2, hidden_dim=16,
...     intermediate_dim=32, max_sequence_length=16))
>>> model(np.array([[5, 6, 7]])).shape
TensorShape([1, 3, 50])
>>> atomic_save(model, "/tmp/lm.keras")            # the whole model
PosixPath('/tmp/lm.keras')
>>> atomic_save(model, "/tmp/lm.weights.h5")       # the weights only
PosixPath('/tmp/lm.weights.h5')

Exports that write a folder of files (`keras_tfm.convert.save_hf_*`,
`keras_tfm.zoo.save_preset`) go through `atomic_directory`: they refuse a
folder that holds files unless `overwrite=True`, and write a sibling folder
that replaces the old one only when complete.

Loading: `keras.models.load_model` reports a truncated or corrupt `.keras`
file as "File not found" (it treats any file that does not open as a zip as
missing), and a damaged byte inside the archive can even load silently.
`load_model` here checks the archive first (every member's CRC) and says what
is wrong; the CLI and the zoo check their files the same way
(`check_model_file`).

>>> model = load_model("/tmp/lm.keras")
>>> check_model_file("/tmp/lm.weights.h5")
PosixPath('/tmp/lm.weights.h5')
"""

import contextlib
import json
import os
import secrets
import shutil
import tempfile
import zipfile
from pathlib import Path

import keras

from keras_tfm._keras_compat import save_weights_only
from keras_tfm.legacy_files import is_legacy_config, load_legacy_model

MODEL_SUFFIX = ".keras"
WEIGHTS_SUFFIX = ".weights.h5"


def _fsync_directory(directory):
    if os.name != "posix":
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_path(path, suffix=""):
    """Yields a temporary path beside `path`; renames it onto `path` on success.

    On any exception (or KeyboardInterrupt) the temporary file is removed and
    `path` keeps its previous content.

    Example:
    >>> with atomic_path("/tmp/notes.txt") as tmp:
    ...     Path(tmp).write_text("done")
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix, dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)
        raise
    _fsync_directory(path.parent)


def check_target_directory(directory, overwrite=False):
    """Refuses to write into a folder that holds files, unless `overwrite`.

    Args:
        directory: the folder an export will write.
        overwrite: whether replacing an existing non-empty folder is wanted.

    Returns:
        `directory`, a `pathlib.Path`.

    Raises:
        ValueError: if `directory` is a file, or a non-empty folder while
            `overwrite` is False.
    """
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise ValueError(
            "`directory` must be a folder to write, but it is a file. "
            f"Received: directory={str(directory)!r}"
        )
    if not overwrite and directory.is_dir() and any(directory.iterdir()):
        raise ValueError(
            "`directory` exists and is not empty; pass overwrite=True to replace "
            f"it (its files are then deleted). Received: directory={str(directory)!r}"
        )
    return directory


def _fsync_tree(directory):
    for path in sorted(Path(directory).rglob("*"), reverse=True):
        if path.is_file():
            with open(path, "rb") as f:
                os.fsync(f.fileno())
        elif path.is_dir():
            _fsync_directory(path)
    _fsync_directory(directory)


def _fresh_sibling(directory, tag):
    """A new empty folder `.<name>.<tag>-<random>` beside `directory`.

    Made with `mkdir`, so it gets the user's usual permissions (umask), as
    the folder it becomes should (`tempfile.mkdtemp` would make it private).
    """
    while True:
        path = directory.parent / f".{directory.name}.{tag}-{secrets.token_hex(4)}"
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue


@contextlib.contextmanager
def atomic_directory(directory, overwrite=False):
    """Yields a temporary folder beside `directory`; moves it into place on success.

    For exports that write several files (a HuggingFace checkpoint, a
    preset): everything is written into a fresh sibling folder, which
    replaces `directory` only once the block has finished. If the block
    raises (a full disk, an interrupted process, a failed check), the
    temporary folder is removed and `directory` keeps its previous files,
    byte for byte. A non-empty `directory` is refused unless `overwrite`
    (as `keras.Model.save` asks), before anything is written.

    A folder cannot be swapped for another in one atomic step: the old one
    is renamed aside (into `.<name>.old-*` in the same parent), the new one
    renamed in, and the old one deleted. Only a crash between the two
    renames leaves no `directory`; the old files are then in `.<name>.old-*`.

    Args:
        directory: the folder to write (its parent is created if needed).
        overwrite: whether an existing non-empty `directory` may be replaced.

    Yields:
        The temporary folder (a `pathlib.Path`) to write into.

    Raises:
        ValueError: as `check_target_directory`.

    Example:
    >>> import tempfile
    >>> target = Path(tempfile.mkdtemp()) / "export"
    >>> with atomic_directory(target) as tmp:
    ...     _ = (tmp / "config.json").write_text("{}")
    >>> sorted(path.name for path in target.iterdir())
    ['config.json']
    """
    given = check_target_directory(directory, overwrite)
    directory = Path(os.path.abspath(given))  # "." has a parent, and a name
    if Path.cwd() == directory or directory in Path.cwd().parents:
        raise ValueError(
            "`directory` holds the current working directory, which replacing "
            "it would delete from under this process: write to another folder. "
            f"Received: directory={str(given)!r}"
        )
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = _fresh_sibling(directory, "tmp")
    try:
        yield tmp
        _fsync_tree(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = None
    if directory.exists():
        old = _fresh_sibling(directory, "old")
        os.replace(directory, old / directory.name)
    try:
        os.replace(tmp, directory)
    except BaseException:
        if old is not None:
            os.replace(old / directory.name, directory)
            old.rmdir()
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _fsync_directory(directory.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def atomic_save(model, path, include_optimizer=True):
    """Saves `model` to `path` (`.keras` or `.weights.h5`) atomically.

    Args:
        model: a Keras model (or layer, for `.weights.h5`).
        path: ends in ".keras" (`model.save`) or ".weights.h5"
            (`model.save_weights`, which includes a built optimizer's state).
        include_optimizer: False leaves the optimizer's state out (what a
            preset or an inference copy wants; the file is then about a
            third of a trained model's with Adam). For ".keras" the file is
            then that of `uncompiled_copy(model)`.

    Returns:
        `path`, a `pathlib.Path`.

    Raises:
        ValueError: if `path` has another ending.
    """
    path = Path(path)
    if path.name.endswith(WEIGHTS_SUFFIX):
        suffix, write = WEIGHTS_SUFFIX, model.save_weights
        optimizer = getattr(model, "optimizer", None)
        if not include_optimizer and optimizer is not None:
            # Keras' save_weights has no switch for this (see _keras_compat).
            def write(filepath, overwrite):
                save_weights_only(model, filepath, objects_to_skip=[optimizer])

    elif path.name.endswith(MODEL_SUFFIX):
        if not include_optimizer and getattr(model, "optimizer", None) is not None:
            model = uncompiled_copy(model)
        suffix, write = MODEL_SUFFIX, model.save
    else:
        raise ValueError(
            f"`path` must end in {MODEL_SUFFIX!r} or {WEIGHTS_SUFFIX!r}. "
            f"Received: path={str(path)!r}"
        )
    with atomic_path(path, suffix) as tmp:
        write(str(tmp), overwrite=True)
    return path


def uncompiled_copy(model, **overrides):
    """A copy of `model` with its weights and tokenizer but no optimizer.

    A compiled model's `.keras` or weights file also holds the optimizer's
    state (twice the weights again with Adam); a preset or a file for
    inference or further fine-tuning does not need it.

    Args:
        model: a built Keras model whose class has `from_config`.
        **overrides: entries of `model.get_config()` to replace (e.g.
            `class_names=...`).

    Returns:
        A new, uncompiled model of the same class with the same weights.

    Example:
    >>> model.compile(optimizer="adam", loss="mse")
    >>> copy = uncompiled_copy(model)
    >>> getattr(copy, "optimizer", None) is None
    True
    """
    config = model.get_config()
    # The config holds no vocabulary: the copy gets the model's own objects.
    if getattr(model, "preprocessor", None) is not None:
        config["preprocessor"] = model.preprocessor
    elif getattr(model, "tokenizer", None) is not None:
        config["tokenizer"] = model.tokenizer
    copy = type(model).from_config({**config, **overrides})
    copy.set_weights(model.get_weights())
    return copy


def _damaged(path, problem):
    return ValueError(
        f"{path} is truncated or corrupt ({problem}); it exists, but is not a "
        "whole file. Save it again (`keras_tfm.saving.atomic_save` never leaves "
        f"a partial file). Received: a file of {path.stat().st_size} bytes."
    )


def check_model_file(path):
    """Checks that `path` is a whole `.keras` archive or `.weights.h5` file.

    A `.keras` file must be a zip archive whose members all pass their CRC
    check and that holds Keras' config.json; a `.weights.h5` file must open
    as HDF5. This reads the whole file once.

    Args:
        path: a `.keras` or `.weights.h5` file.

    Returns:
        `path`, a `pathlib.Path`.

    Raises:
        FileNotFoundError: if there is no file at `path`.
        ValueError: if the file is truncated or corrupt.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"No such model file: {path}")
    if path.name.endswith(WEIGHTS_SUFFIX):
        import h5py  # a Keras dependency

        try:
            h5py.File(path, "r").close()
        except OSError as error:
            raise _damaged(path, f"not a readable HDF5 file: {error}") from None
        return path
    if not zipfile.is_zipfile(path):
        raise _damaged(path, "not a zip archive, which a .keras file is")
    try:
        with zipfile.ZipFile(path) as archive:
            bad_member = archive.testzip()
            names = archive.namelist()
    except (zipfile.BadZipFile, OSError, EOFError) as error:
        raise _damaged(path, f"the zip archive does not read: {error}") from None
    if bad_member is not None:
        raise _damaged(path, f"member {bad_member!r} fails its CRC check")
    if "config.json" not in names:
        raise _damaged(path, f"no config.json among its members {names}")
    return path


def load_model(path, **kwargs):
    """`keras.saving.load_model` after `check_model_file`.

    A file written before the Backbone/Task split (a flat `CausalLM` or
    `Seq2SeqTransformer` config, a task with a `tokenizer`) is read by
    `keras_tfm.legacy_files.load_legacy_model`: its config split and its
    weights moved to the new paths, with identical values.

    Args:
        path: a `.keras` file.
        **kwargs: passed to `keras.saving.load_model` (e.g. `compile=False`).

    Returns:
        The loaded model.

    Raises:
        FileNotFoundError: if there is no file at `path`.
        ValueError: if the file is truncated or corrupt, naming the problem.
    """
    path = check_model_file(path)
    with zipfile.ZipFile(path) as archive:
        config = json.loads(archive.read("config.json"))
    if is_legacy_config(config):
        return load_legacy_model(path)
    return keras.saving.load_model(str(path), **kwargs)


def atomic_write_text(path, text):
    """Writes `text` (UTF-8) to `path` atomically. Returns `path`."""
    path = Path(path)
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return path


class ResumableBackupAndRestore(keras.callbacks.BackupAndRestore):
    """`BackupAndRestore` that saves atomically and can resume mid-epoch.

    Keras' callback restores the weights of a mid-epoch backup but then
    replays the whole epoch; this one records the global step (the
    optimizer's `iterations`, saved with the weights) so that the caller can
    skip the batches already trained on: `restore()` before `fit` returns it.
    The data order must then be a function of the epoch alone (e.g. shuffled
    with seed `(seed, epoch)`), so that a restarted process sees the same
    batches. Writes go through `atomic_save`, so a crash while saving leaves
    the previous backup intact. `keras-tfm train` uses it.

    Args:
        backup_dir: the folder of the backup (one per worker).
        save_freq: "epoch" or a number of steps between backups.

    Example:
    >>> backup = ResumableBackupAndRestore("/tmp/run/backup", save_freq=50)
    >>> step = backup.restore(model)        # 0 on a fresh start
    >>> epoch, skip = divmod(step, steps_per_epoch)
    """

    def __init__(self, backup_dir, save_freq="epoch"):
        super().__init__(backup_dir, save_freq=save_freq, delete_checkpoint=False)
        self._restored = False

    def restore(self, model):
        """Loads the latest backup into `model` (and its optimizer), if any.

        Returns:
            The global step of the backup (0 when there is none).
        """
        self.set_model(model)
        if Path(self._weights_path).is_file():
            self._load_model()
        self.model._initial_epoch = None  # the caller passes initial_epoch
        self._restored = True
        return self.global_step()

    def global_step(self):
        optimizer = self.model.optimizer
        if optimizer is None or not optimizer.built:
            return 0
        return int(keras.ops.convert_to_numpy(optimizer.iterations))

    def on_train_begin(self, logs=None):
        if not self._restored:
            self.restore(self.model)

    def on_epoch_begin(self, epoch, logs=None):
        self._current_epoch = epoch

    def _save_model(self):
        atomic_save(self.model, self._weights_path)
        metadata = {
            "epoch": self._current_epoch,
            "batch": self._last_batch_seen,
            "step": self.global_step(),
        }
        atomic_write_text(self._training_metadata_path, json.dumps(metadata))

    def delete(self):
        """Removes the backup folder, once training has finished."""
        shutil.rmtree(self.backup_dir, ignore_errors=True)

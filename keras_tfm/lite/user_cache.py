"""keras-tfm's cache folder: what a second process need not redo, kept safe.

Two caches live under `cache_directory()` (`$KERAS_TFM_CACHE_DIR`, else
`$XDG_CACHE_HOME/keras-tfm`, else `~/.cache/keras-tfm`; `KERAS_TFM_CACHE_DIR=off`
turns both off):

- `xla/<key>/`: TensorFlow's persistent XLA compilation cache
  (`keras_tfm.runtime.use_persistent_xla_cache`);
- `converted/<key>/`: models converted from a checkpoint file (a GGUF file's
  tensors dequantised or repacked, its tokenizer and config), read back
  instead of converting again (`keras_tfm.convert.converted_cache`).

Safety, for both: a folder's `<key>` is the SHA-256 of everything its
contents depend on (`versions()`: keras-tfm, TensorFlow, Keras; plus what the
user of the cache adds), so another version never reads a stale entry; each
folder lists its files with their size and CRC-32 in `MANIFEST` (written
atomically, last), and a file that is missing from it or differs is
deleted (`drop_unsealed`) rather than read; `keras-tfm cache clear`
(`clear()`) removes everything and `keras-tfm cache info` (`info()`) lists it.

Example:
>>> import tempfile
>>> folder = Path(tempfile.mkdtemp())
>>> _ = (folder / "a.bin").write_bytes(b"123")
>>> seal(folder, ["a.bin"])
>>> verify(folder)
True
>>> _ = (folder / "a.bin").write_bytes(b"12")   # truncated
>>> verify(folder)
False
"""

import functools
import hashlib
import json
import os
import secrets
import shutil
import zlib
from pathlib import Path

CACHE_ENV = "KERAS_TFM_CACHE_DIR"
OFF = "off"
MANIFEST = "MANIFEST"


def cache_directory():
    """The cache folder (not created), or None if `KERAS_TFM_CACHE_DIR=off`.

    Example:
    >>> cache_directory() is None or cache_directory().is_absolute()
    True
    """
    chosen = os.environ.get(CACHE_ENV)
    if chosen == OFF:
        return None
    if chosen:
        return Path(chosen).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "keras-tfm"


def unusable_cache_directory():
    """Why the cache folder `cache_directory()` names cannot be a folder
    (one line naming it), or None if it can."""
    folder = cache_directory()
    if folder is None or folder.is_dir() or not folder.exists():
        return None
    return (
        f"{CACHE_ENV} names a file, not a folder: {folder} (set it to a folder, "
        f"or to {OFF} to run without the cache)"
    )


@functools.cache
def versions():
    """The versions every cache key includes: keras-tfm, TensorFlow, Keras."""
    from importlib import metadata

    found = {}
    for name in ("keras-tfm", "tensorflow", "keras"):
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "absent"
    return found


def cache_key(**fields):
    """The SHA-256 (hex) of `fields` plus `versions()`, in a canonical form.

    Example:
    >>> cache_key(a=1) == cache_key(a=1), cache_key(a=1) == cache_key(a=2)
    (True, False)
    """
    described = json.dumps({**versions(), **fields}, sort_keys=True, default=str)
    return hashlib.sha256(described.encode("utf-8")).hexdigest()


def file_sha256(path, root=None):
    """The SHA-256 (hex) of a file's bytes, remembered per file version.

    Hashing SmolLM2's 98 MB GGUF file costs ~0.2 s; the digest is kept in the
    cache under the file's identity (absolute path, size, modification time
    in ns, inode), so that the next process only `stat`s the file. A file
    rewritten in place changes its modification time and is hashed again.
    `root`: the cache folder (default `cache_directory()`).
    """
    path = Path(path).resolve()
    status = path.stat()
    identity = f"{path}|{status.st_size}|{status.st_mtime_ns}|{status.st_ino}"
    root = cache_directory() if root is None else Path(root)
    memo = None
    if root is not None:
        name = hashlib.sha256(identity.encode("utf-8")).hexdigest()
        memo = root / "digests" / name
        try:
            digest = memo.read_text(encoding="ascii").strip()
            if len(digest) == 64 and all(c in "0123456789abcdef" for c in digest):
                return digest
        except (OSError, UnicodeDecodeError):
            pass
    hasher = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 22), b""):
            hasher.update(block)
    digest = hasher.hexdigest()
    if memo is not None:
        try:
            write_atomically(memo, digest.encode("ascii"))
        except OSError:
            pass  # a read-only cache still works, it only hashes again
    return digest


def write_atomically(path, data):
    """Writes `data` (bytes) to `path` through a temporary file and a rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{secrets.token_hex(4)}")
    try:
        with open(tmp, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _crc32(path):
    crc = 0
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 22), b""):
            crc = zlib.crc32(block, crc)
    return crc


def read_manifest(folder):
    """`{file name: [size, crc32]}` of `folder`'s MANIFEST ({} if unreadable)."""
    try:
        listed = json.loads((Path(folder) / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return {}
    if not isinstance(listed, dict):
        return {}
    return {
        name: entry
        for name, entry in listed.items()
        if isinstance(entry, list) and len(entry) == 2
    }


def seal(folder, names, keep=None):
    """Lists `names` (files in `folder`) in its MANIFEST with size and CRC-32.

    `keep`: entries of an earlier manifest to keep (their files unchanged).
    """
    folder = Path(folder)
    listed = dict(keep or {})
    for name in names:
        path = folder / name
        listed[name] = [path.stat().st_size, _crc32(path)]
    write_atomically(folder / MANIFEST, json.dumps(listed, sort_keys=True).encode())


def _matches(path, entry):
    try:
        return path.stat().st_size == entry[0] and _crc32(path) == entry[1]
    except OSError:
        return False


def verify(folder, names=None):
    """Whether every file `names` (default: all listed) matches MANIFEST."""
    folder = Path(folder)
    listed = read_manifest(folder)
    names = list(listed) if names is None else list(names)
    if not names:
        return False
    return all(
        name in listed and _matches(folder / name, listed[name]) for name in names
    )


def drop_unsealed(folder, pattern="*"):
    """Deletes the files of `folder` matching `pattern` that MANIFEST does
    not list as they are (half-written, garbled, truncated, or written by a
    process that ended before sealing them); returns the manifest kept.
    """
    folder = Path(folder)
    listed = read_manifest(folder)
    kept = {}
    for path in folder.glob(pattern):
        if path.name == MANIFEST or not path.is_file():
            continue
        entry = listed.get(path.name)
        if entry is not None and _matches(path, entry):
            kept[path.name] = entry
        else:
            path.unlink(missing_ok=True)
    return kept


def _size(path):
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def info():
    """`{cache name: (entries, bytes)}` for each cache folder present."""
    root = cache_directory()
    if root is None or not root.is_dir():
        return {}
    found = {}
    for child in sorted(root.iterdir()):
        if child.is_dir():
            entries = [p for p in child.iterdir() if not p.name.startswith(".")]
            found[child.name] = (len(entries), _size(child))
    return found


def clear():
    """Deletes the cache folder; returns the bytes freed."""
    root = cache_directory()
    if root is None or not root.exists():
        return 0
    freed = _size(root)
    shutil.rmtree(root)
    return freed

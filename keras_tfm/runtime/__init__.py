"""Process-wide runtime settings keras-tfm makes: XLA's CPU flags and
TensorFlow's persistent XLA compilation cache.

The persistent cache (`use_persistent_xla_cache`): TensorFlow compiles each
`jit_compile=True` function once per process, and SmolLM2's decoding step
takes seconds to compile (most of a cold `keras-tfm chat`,
benchmarks/cold_start.py). With `--tf_xla_persistent_cache_directory` in
`TF_XLA_FLAGS`, TensorFlow writes each compiled executable to that folder
and the next process loads it instead of compiling. keras-tfm sets it once
Keras is imported beside it (`keras_tfm._registration`; at `import keras_tfm`
where TensorFlow already is), to `xla/<key>` in its cache folder
(`keras_tfm.lite.user_cache`), unless `TF_XLA_FLAGS` already names a folder
or `KERAS_TFM_CACHE_DIR=off`; TensorFlow
reads `TF_XLA_FLAGS` at its first XLA compilation, so the setting applies
after `import tensorflow` too. `<key>` hashes the TensorFlow, Keras and
keras-tfm versions, `XLA_FLAGS` and the CPU's features: TensorFlow's own
file names hash the computation only, and an executable built for another
CPU or with other flags must not be loaded. TensorFlow stops with a
DataLossError on a garbled or truncated file, so each process lists the
files it found and wrote, with their size and CRC-32, when it exits
(`user_cache.seal`), and the next one deletes any file not listed as it is
before TensorFlow can read it (`user_cache.drop_unsealed`).

512-bit vectors:

512-bit vectors for XLA's CPU code where the CPU has AVX-512.

XLA's CPU backend emits 256-bit vector code by default, even on an AVX-512
CPU. Its fused loops are what a batch-1 decoding step spends its time in
besides reading the weights (the dequantising matrix-vector products, the
small ops of 30 layers), and 512-bit vectors shorten them: on a 2-core
Intel Xeon with AVX-512, SmolLM2-135M greedy decoding at batch 1 went from
32.2 to 35.3 tokens/s in float32 and from 36.8 to 52.6 with weight-only
int8, while training speed did not change (docs/benchmarks/decoding.md). Importing
keras_tfm therefore adds `--xla_cpu_prefer_vector_width=512` to the
`XLA_FLAGS` environment variable on such CPUs. XLA reads its flags once, at
the first compilation in the process, so it applies to every XLA
compilation after `import keras_tfm` and to none before it.

To keep XLA's default, set the width yourself before importing keras_tfm:
`XLA_FLAGS=--xla_cpu_prefer_vector_width=256`; a width already in
`XLA_FLAGS` is never changed.
"""

import atexit
import os

from keras_tfm.lite.user_cache import (
    cache_directory,
    cache_key,
    drop_unsealed,
    read_manifest,
    seal,
)

WIDE_VECTOR_FLAG = "--xla_cpu_prefer_vector_width=512"


def cpu_flags(path="/proc/cpuinfo"):
    """The CPU's feature flags (Linux), or an empty set where unknown."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def with_wide_vectors(xla_flags, flags):
    """`xla_flags` plus 512-bit vectors if the CPU `flags` include AVX-512.

    Args:
        xla_flags: the `XLA_FLAGS` string as it is (may be empty).
        flags: the CPU's feature flags, as `cpu_flags()` returns them.

    Returns:
        The `XLA_FLAGS` string to use: unchanged without `avx512f` or when it
        already sets a vector width.

    Example:
    >>> with_wide_vectors("--xla_cpu_enable_fast_math=false", {"avx512f"})
    '--xla_cpu_enable_fast_math=false --xla_cpu_prefer_vector_width=512'
    >>> with_wide_vectors("", {"avx2"})
    ''
    """
    if "avx512f" not in flags or "xla_cpu_prefer_vector_width" in xla_flags:
        return xla_flags
    return f"{xla_flags} {WIDE_VECTOR_FLAG}".strip()


def prefer_wide_vectors():
    """Sets `XLA_FLAGS` as `with_wide_vectors` says for this CPU (on import)."""
    xla_flags = os.environ.get("XLA_FLAGS", "")
    wanted = with_wide_vectors(xla_flags, cpu_flags())
    if wanted != xla_flags:
        os.environ["XLA_FLAGS"] = wanted


PERSISTENT_CACHE_FLAG = "--tf_xla_persistent_cache_directory"
XLA_CACHE_FILES = "xla_compile_cache__*.pb"


def xla_cache_folder(root, xla_flags, flags):
    """The XLA cache folder under `root` for these flags and CPU features.

    Example:
    >>> from pathlib import Path
    >>> a = xla_cache_folder(Path("/c"), "", {"avx2"})
    >>> a.parent
    PosixPath('/c/xla')
    >>> a == xla_cache_folder(Path("/c"), "", {"avx2", "avx512f"})
    False
    """
    key = cache_key(xla_flags=xla_flags, cpu_flags=sorted(flags))
    return root / "xla" / key[:32]


def use_persistent_xla_cache():
    """Points TensorFlow's persistent XLA cache at keras-tfm's cache folder.

    Returns the folder, or None where it is left alone (`TF_XLA_FLAGS`
    already names one, `KERAS_TFM_CACHE_DIR=off`, or the folder cannot be
    created). Files not sealed by an earlier process are deleted first; this
    process's are sealed at exit.
    """
    tf_xla_flags = os.environ.get("TF_XLA_FLAGS", "")
    root = cache_directory()
    if root is None or PERSISTENT_CACHE_FLAG in tf_xla_flags:
        return None
    folder = xla_cache_folder(root, os.environ.get("XLA_FLAGS", ""), cpu_flags())
    try:
        folder.mkdir(parents=True, exist_ok=True)
        kept = drop_unsealed(folder, XLA_CACHE_FILES)
    except OSError:
        return None
    flag = f"{PERSISTENT_CACHE_FLAG}={folder}"
    os.environ["TF_XLA_FLAGS"] = f"{tf_xla_flags} {flag}".strip()
    atexit.register(_seal_xla_cache, folder, kept)
    return folder


def _seal_xla_cache(folder, kept):
    if not folder.is_dir():
        return  # cleared meanwhile (`keras-tfm cache clear`)
    new = [p.name for p in folder.glob(XLA_CACHE_FILES) if p.name not in kept]
    if not new:
        return
    try:
        known = read_manifest(folder)
        seal(folder, new, keep={**known, **kept})
    except OSError:
        pass  # the folder was cleared meanwhile: the files stay unsealed

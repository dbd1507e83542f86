"""Process-wide runtime settings keras-tfm makes on import: XLA's CPU flags.

512-bit vectors for XLA's CPU code where the CPU has AVX-512.

XLA's CPU backend emits 256-bit vector code by default, even on an AVX-512
CPU. Its fused loops are what a batch-1 decoding step spends its time in
besides reading the weights (the dequantising matrix-vector products, the
small ops of 30 layers), and 512-bit vectors shorten them: on a 2-core
Intel Xeon with AVX-512, SmolLM2-135M greedy decoding at batch 1 went from
32.2 to 35.3 tokens/s in float32 and from 36.8 to 52.6 with weight-only
int8, while training speed did not change (docs/benchmarks.md). Importing
keras_tfm therefore adds `--xla_cpu_prefer_vector_width=512` to the
`XLA_FLAGS` environment variable on such CPUs. XLA reads its flags once, at
the first compilation in the process, so it applies to every XLA
compilation after `import keras_tfm` and to none before it.

To keep XLA's default, set the width yourself before importing keras_tfm:
`XLA_FLAGS=--xla_cpu_prefer_vector_width=256`; a width already in
`XLA_FLAGS` is never changed.
"""

import os

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

"""`import keras_tfm` asks XLA for 512-bit vectors on AVX-512 CPUs, and only
there, and never overrides a width the user set."""

import doctest
import os
import subprocess
import sys

import pytest

from keras_tfm.training import xla_cpu_flags
from keras_tfm.training.device_settings import cpu_flags
from keras_tfm.training.xla_cpu_flags import WIDE_VECTOR_FLAG, with_wide_vectors


@pytest.mark.parametrize(
    "xla_flags, flags, expected",
    [
        ("", {"avx2", "avx512f"}, WIDE_VECTOR_FLAG),
        ("", {"avx2", "fma"}, ""),
        ("", set(), ""),  # unknown CPU (no /proc/cpuinfo)
        ("--xla_dump_to=/tmp/x", {"avx512f"},
         f"--xla_dump_to=/tmp/x {WIDE_VECTOR_FLAG}"),
        ("--xla_cpu_prefer_vector_width=256", {"avx512f"},
         "--xla_cpu_prefer_vector_width=256"),
    ],
)  # fmt: skip
def test_with_wide_vectors(xla_flags, flags, expected):
    assert with_wide_vectors(xla_flags, flags) == expected


def xla_flags_after_import(environment):
    """`XLA_FLAGS` in a fresh Python after `import keras_tfm`, or None."""
    code = "import os, keras_tfm; print(repr(os.environ.get('XLA_FLAGS')))"
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env.update(environment, TF_CPP_MIN_LOG_LEVEL="3")
    process = subprocess.run([sys.executable, "-c", code], env=env,
                             capture_output=True, text=True, timeout=300)  # fmt: skip
    assert process.returncode == 0, process.stderr
    return eval(process.stdout.strip().splitlines()[-1])


def test_import_sets_the_width_for_this_cpu_and_keeps_the_users():
    expected = with_wide_vectors("", cpu_flags()) or None
    assert xla_flags_after_import({}) == expected
    mine = "--xla_cpu_prefer_vector_width=256"
    assert xla_flags_after_import({"XLA_FLAGS": mine}) == mine


def test_docstring_example():
    result = doctest.testmod(xla_cpu_flags)
    assert result.attempted > 0 and result.failed == 0

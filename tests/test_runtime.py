"""`import keras_tfm` asks XLA for 512-bit vectors on AVX-512 CPUs, and only
there, and never overrides a width the user set."""

import ast
import doctest
import os
import subprocess
import sys

import pytest

from keras_tfm import runtime
from keras_tfm.runtime import WIDE_VECTOR_FLAG, cpu_flags, with_wide_vectors


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


def after_import(tmp_path, xla_flags=""):
    """In a fresh Python that imports keras_tfm and then XLA-compiles an
    elementwise function: `XLA_FLAGS` after the import, and how many
    16-wide and 8-wide float vectors XLA's optimized LLVM IR holds."""
    code = (
        "import os, keras_tfm, tensorflow as tf\n"
        "print(repr(os.environ.get('XLA_FLAGS')))\n"
        "f = tf.function(lambda x: tf.exp(x) * 2.0, jit_compile=True)\n"
        "f(tf.ones([4096])).numpy()\n"
    )
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3",
               XLA_FLAGS=f"--xla_dump_to={tmp_path} {xla_flags}".strip())  # fmt: skip
    process = subprocess.run([sys.executable, "-c", code], env=env,
                             capture_output=True, text=True, timeout=300)  # fmt: skip
    assert process.returncode == 0, process.stderr
    flags = ast.literal_eval(process.stdout.strip().splitlines()[-1])
    ir = "".join(p.read_text() for p in tmp_path.glob("*ir-with-opt.ll"))
    return flags, ir.count("<16 x float>"), ir.count("<8 x float>")


@pytest.mark.slow  # a fresh process
def test_import_widens_xla_vectors_on_this_cpu(tmp_path):
    flags, wide, narrow = after_import(tmp_path)
    assert flags == with_wide_vectors(f"--xla_dump_to={tmp_path}", cpu_flags())
    if "avx512f" in cpu_flags():
        assert wide > narrow
    else:
        assert wide == 0


@pytest.mark.slow  # a fresh process
def test_a_width_the_user_set_is_kept(tmp_path):
    mine = "--xla_cpu_prefer_vector_width=256"
    flags, wide, narrow = after_import(tmp_path, mine)
    assert flags == f"--xla_dump_to={tmp_path} {mine}"
    assert narrow > wide


def test_docstring_example():
    result = doctest.testmod(runtime)
    assert result.attempted > 0 and result.failed == 0

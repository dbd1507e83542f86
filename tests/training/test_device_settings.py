import doctest
import re
from pathlib import Path

import pytest
import tensorflow as tf

from keras_tfm.runtime import device_settings as module
from keras_tfm.runtime.device_settings import cpu_flags, device_defaults


class FakeGPU:
    pass


def test_cpu_with_native_bfloat16_trains_in_mixed_bfloat16_without_xla():
    for flag in ("avx512_bf16", "amx_bf16"):
        defaults = device_defaults(gpus=[], flags={"avx512f", flag})
        assert defaults.dtype_policy == "mixed_bfloat16"
        assert defaults.jit_compile is False
        assert flag in defaults.reason


def test_cpu_without_native_bfloat16_trains_in_float32_with_xla():
    defaults = device_defaults(gpus=[], flags={"avx2", "fma", "avx512f"})
    assert (defaults.dtype_policy, defaults.jit_compile) == ("float32", True)


def test_gpu_policy_follows_compute_capability(monkeypatch):
    capabilities = {"a100": (8, 0), "v100": (7, 0), "unknown": None}
    monkeypatch.setattr(
        module, "_compute_capability", lambda gpu: capabilities[gpu.name]
    )
    gpu = FakeGPU()
    expected = {"a100": "mixed_bfloat16", "v100": "mixed_float16",
                "unknown": "mixed_float16"}  # fmt: skip
    for name, policy in expected.items():
        gpu.name = name
        defaults = device_defaults(gpus=[gpu], flags={"avx512_bf16"})
        assert (defaults.dtype_policy, defaults.jit_compile) == (policy, True)


def test_cpu_flags_reads_the_flags_line(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu avx512_bf16 sse\n")
    assert cpu_flags(str(cpuinfo)) == {"fpu", "avx512_bf16", "sse"}
    assert cpu_flags(str(tmp_path / "missing")) == set()


def test_this_machine_is_read_from_its_cpu_flags_and_gpus():
    # This machine's facts, read here independently of cpu_flags().
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
    except OSError:
        pytest.skip("no /proc/cpuinfo (not Linux)")
    line = re.search(r"^flags\s*:(.*)$", cpuinfo, re.MULTILINE)
    flags = set(line.group(1).split()) if line else set()
    gpus = tf.config.list_physical_devices("GPU")
    # The defaults read the same facts: a parser that lost the flags, or a
    # default path that skipped the GPUs, gives another answer on a machine
    # with native bfloat16 or a GPU.
    assert cpu_flags() == flags
    assert device_defaults() == device_defaults(gpus=gpus, flags=flags)
    if not gpus and flags & {"avx512_bf16", "amx_bf16"}:
        assert device_defaults().dtype_policy == "mixed_bfloat16"


def test_docstring_example():
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0


def test_a_jax_gpu_is_read_by_its_compute_capability():
    class JaxGPU:  # what jax.devices() gives on an NVIDIA GPU
        platform, device_kind, compute_capability = "gpu", "NVIDIA H100", "9.0"

    defaults = device_defaults(gpus=[JaxGPU()], flags=set())
    assert (defaults.dtype_policy, defaults.jit_compile) == ("mixed_bfloat16", True)
    assert "(9, 0)" in defaults.reason


def test_a_cpu_on_another_backend_compiles_float32(monkeypatch):
    # JAX runs op by op without XLA, and XLA's CPU bfloat16 is no faster.
    monkeypatch.setattr(module, "_backend", lambda: "jax")
    defaults = device_defaults(gpus=[], flags={"avx512f", "avx512_bf16"})
    assert (defaults.dtype_policy, defaults.jit_compile) == ("float32", True)
    assert "avx512_bf16" in defaults.reason


def test_the_description_names_the_backend_and_the_device(monkeypatch):
    assert re.fullmatch(
        r"TensorFlow on the CPU \(\d+ cores\)", module.device_description()
    )

    class JaxGPU:
        device_kind = "NVIDIA H100 80GB HBM3"

    monkeypatch.setattr(module, "visible_gpus", lambda: [JaxGPU(), JaxGPU()])
    assert module.device_description() == (
        "TensorFlow on NVIDIA H100 80GB HBM3 (and 1 more)"
    )

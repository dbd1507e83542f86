"""The fastest measured dtype policy and XLA setting for the device at hand."""

import collections

from keras_tfm.runtime import cpu_flags

DeviceDefaults = collections.namedtuple(
    "DeviceDefaults", ["dtype_policy", "jit_compile", "reason"]
)
"""What `device_defaults()` returns: `dtype_policy` (a Keras dtype policy
name), `jit_compile` (bool) and `reason` (why, in words)."""

# CPU flags of a native bfloat16 dot product (AVX-512 BF16: Zen 4, Cooper
# Lake and later Xeons; AMX: Sapphire Rapids and later).
BFLOAT16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")


def device_defaults(gpus=None, flags=None):
    """The dtype policy and `jit_compile` that train fastest here.

    - A GPU: XLA with `mixed_bfloat16` on compute capability 8.0 and newer
      (A100, H100, RTX 30xx/40xx), `mixed_float16` before (Keras adds loss
      scaling for it).
    - A CPU with native bfloat16 dot products (`avx512_bf16` or `amx_bf16`):
      `mixed_bfloat16` *without* XLA. TensorFlow's oneDNN kernels run bfloat16
      matmuls at about twice the float32 rate there, but XLA's CPU backend
      does not use them (docs/benchmarks.md: 410 against 209 GFLOP/s for
      oneDNN bfloat16 against float32, about 198 for XLA bfloat16; 1.7-1.8x
      the float32+XLA training tokens/s of the benchmark's encoders, d_model
      256 and 512). Models as small as d_model 128 gain nothing.
    - Any other CPU, or any CPU on a backend other than TensorFlow: float32
      with XLA.

    The softmax of keras-tfm's attention and the logits stay float32 under
    every policy. Set the policy before building the model and pass
    `jit_compile` to `compile`.

    Args:
        gpus: the GPUs to consider (by default the Keras backend's visible
            GPUs: TensorFlow's physical devices, JAX's "gpu" devices).
        flags: the CPU flags to consider (by default read from /proc/cpuinfo).

    Returns:
        `DeviceDefaults(dtype_policy, jit_compile, reason)`.

    Example:
    >>> defaults = device_defaults(gpus=[], flags={"avx2", "fma"})
    >>> defaults.dtype_policy, defaults.jit_compile
    ('float32', True)
    >>> device_defaults(gpus=[], flags={"avx512f", "avx512_bf16"})[:2]
    ('mixed_bfloat16', False)
    """
    if gpus is None:
        gpus = visible_gpus()
    if gpus:
        capability = _compute_capability(gpus[0])
        if capability is not None and capability >= (8, 0):
            return DeviceDefaults(
                "mixed_bfloat16", True, f"GPU of compute capability {capability}"
            )
        return DeviceDefaults(
            "mixed_float16", True, f"GPU of compute capability {capability}"
        )
    flags = cpu_flags() if flags is None else set(flags)
    native = sorted(flags.intersection(BFLOAT16_CPU_FLAGS))
    if native and _backend() != "tensorflow":
        return DeviceDefaults(
            "float32", True, f"CPU with {', '.join(native)}, but only "
            "TensorFlow's oneDNN kernels use them; XLA compiles each step"
        )  # fmt: skip
    if native:
        return DeviceDefaults(
            "mixed_bfloat16",
            False,
            f"CPU with {', '.join(native)}: oneDNN bfloat16 matmuls, which XLA "
            "does not use",
        )
    return DeviceDefaults("float32", True, "CPU without native bfloat16")


def _backend():
    import keras

    return keras.backend.backend()


def visible_gpus():
    """The Keras backend's GPUs: TensorFlow's physical GPU devices, JAX's
    devices of platform "gpu"; none on another backend."""
    backend = _backend()
    if backend == "tensorflow":
        import tensorflow as tf

        return tf.config.list_physical_devices("GPU")
    if backend == "jax":
        import jax

        return [d for d in jax.devices() if d.platform == "gpu"]
    return []


def device_description():
    """What `keras-tfm train` trains on, in words: the Keras backend and its
    first GPU (its name), or the CPU's cores, e.g. "TensorFlow on the CPU
    (2 cores)"."""
    import os

    names = {"tensorflow": "TensorFlow", "jax": "JAX", "torch": "PyTorch"}
    backend = names.get(_backend(), _backend())
    gpus = visible_gpus()
    if not gpus:
        cores = (
            len(os.sched_getaffinity(0))
            if hasattr(os, "sched_getaffinity")
            else os.cpu_count()
        )
        return f"{backend} on the CPU ({cores} cores)"
    name = getattr(gpus[0], "device_kind", None) or _device_name(gpus[0]) or "a GPU"
    more = f" (and {len(gpus) - 1} more)" if len(gpus) > 1 else ""
    return f"{backend} on {name}{more}"


def _tensorflow_details(gpu):
    """TensorFlow's description of `gpu` ({} if it cannot read one)."""
    try:
        import tensorflow as tf

        return tf.config.experimental.get_device_details(gpu)
    except Exception:  # a device TensorFlow cannot describe (e.g. JAX's)
        return {}


def _device_name(gpu):
    return _tensorflow_details(gpu).get("device_name")


def _compute_capability(gpu):
    capability = getattr(gpu, "compute_capability", None)  # a JAX device's: "9.0"
    if capability is not None:
        try:
            return tuple(int(part) for part in str(capability).split("."))
        except ValueError:
            return None
    return _tensorflow_details(gpu).get("compute_capability")

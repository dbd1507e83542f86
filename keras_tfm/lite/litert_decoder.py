"""`LiteRTDecoder`: a decoding step written by `export_litert_decoder`, run.

The file holds the signatures of `keras_tfm.export.litert_decoder`:
`prefill`, a chunk of `prefill_length` tokens (the last chunk padded, its
real length given), and `decode`, one token (through `decode_<window>`
while the token's position is below a window); each takes every block's
key/value cache and returns it written, and the decoder keeps them between
calls (one LiteRT buffer a block, bound as input and output: written in
place). Both shapes are static, so XNNPACK takes the whole graph. By
default it runs as a LiteRT `CompiledModel` on the CPU (XNNPACK) with
XNNPACK's weight cache: the weights packed once into a file beside the
decoder (`<file>.xnnpack`), mapped by every later process and shared by
both signatures; or through LiteRT's builtin kernels (`kernels="builtin"`,
the caches as NumPy arrays). LiteRT's lines about its accelerators (on stderr,
with no setting to turn them off) are dropped. Imports neither TensorFlow
nor Keras.

Example:
>>> # a file written by keras_tfm.export.export_litert_decoder
>>> decoder = LiteRTDecoder("decoder.tflite")  # doctest: +SKIP
>>> logits = decoder.prefill([1, 2, 3], 0)  # doctest: +SKIP
>>> logits = decoder.decode(int(logits.argmax()), 3)  # doctest: +SKIP
"""

import atexit
import contextlib
import functools
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

WEIGHT_CACHE_SUFFIX = ".xnnpack"
"""The packed weights' file is the decoder's name with this suffix."""
KERNELS = ("xnnpack", "builtin")

CACHE_PREFIX = "cache_"
"""The signatures' cache inputs and outputs: `cache_000`, `cache_001`, ...
(1, 2, buffer_length, kv_heads, head_dim) each, one a block."""

PREFILL_LENGTH = 32
"""Positions of a step file's `prefill` signature: a prompt goes through in
chunks of this many (the last padded), then one token a `decode` call."""


SMALLEST_WINDOW = 64
"""A step file's smallest `decode_<window>` signature (`decode_windows`)."""


def decode_windows(buffer_length):
    """The windows of a step file's `decode_<window>` signatures: 64, 128,
    ... each a power of two below `buffer_length` (the whole buffer is
    `decode`'s)."""
    windows, window = [], SMALLEST_WINDOW
    while window < buffer_length:
        windows.append(window)
        window *= 2
    return tuple(windows)


def window_signature(window):
    """The name of the `decode` signature whose attention reads `window`
    positions."""
    return f"decode_{window}"


def default_prefill_length(buffer_length):
    """A step file's `prefill` length when none is asked: `PREFILL_LENGTH`,
    or the whole buffer if it is shorter."""
    return min(PREFILL_LENGTH, buffer_length)


def available_cpus():
    """The CPUs this process may run on (its affinity, not the machine's)."""
    return len(os.sched_getaffinity(0))


def _interpreter(path, num_threads):
    """The interpreter (builtin kernels), `{signature: {input: shape}}` and
    the cache's length."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    interpreter = Interpreter(
        model_path=str(path),
        num_threads=num_threads,
        experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES,
    )
    signatures = {
        name: {
            key: tuple(detail["shape"])
            for key, detail in interpreter.get_signature_runner(name)
            .get_input_details()
            .items()
        }
        for name in interpreter.get_signature_list()
    }
    caches = [shape for key, shape in signatures.get("decode", {}).items()
              if key.startswith(CACHE_PREFIX)]  # fmt: skip
    return interpreter, signatures, int(caches[0][2]) if caches else None


@contextlib.contextmanager
def _stderr_to_devnull():
    """File descriptor 2 points at /dev/null inside the block."""
    sys.stderr.flush()
    saved = os.dup(2)
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(null)


def _silence_at_exit():
    """At exit, after Python's last words: LiteRT's accelerators say goodbye
    on stderr as the process ends (ai-edge-litert exports no logger setting)."""
    sys.stderr.flush()
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 2)


def _compiled_model(path, num_threads, weight_cache):
    """`path` as a LiteRT `CompiledModel` on the CPU (XNNPACK)."""
    from ai_edge_litert import compiled_model, cpu_options, environment, options

    cpu = cpu_options.CpuOptions(
        num_threads=num_threads, xnnpack_weight_cache_path=str(weight_cache or "")
    )
    with tempfile.TemporaryDirectory() as none:
        # No vendor plugins (NPU, OpenVINO) looked for: the CPU only.
        where = environment.EnvironmentOptions(
            runtime_path=str(Path(compiled_model.__file__).parent),
            compiler_plugin_path=none,
            dispatch_library_path=none,
        )
        return compiled_model.CompiledModel.from_file(
            str(path),
            environment=environment.Environment.create(options=where),
            options=options.Options(cpu_options=cpu),
        )


def _fresh_weight_cache(path, weight_cache):
    """`weight_cache`, removed first if `path` was written after it.

    XNNPACK maps a weight cache without checking the file it was packed
    from, so a step rewritten in place would run on its old weights. A
    cache that cannot be removed gives None (pack in memory).
    """
    if weight_cache is None:
        return None
    cache = Path(weight_cache)
    try:
        if cache.stat().st_mtime_ns <= path.stat().st_mtime_ns:
            cache.unlink()
    except FileNotFoundError:
        pass
    except OSError:
        return None
    return cache


class LiteRTDecoder:
    """A cached decoding step in LiteRT.

    Args:
        path: the `.tflite` file.
        num_threads: CPU threads (default `available_cpus()`).
        kernels: "xnnpack", a `CompiledModel` through XNNPACK with its
            weight cache (the fastest, and as little memory once the cache
            is packed); "builtin", LiteRT's `Interpreter` with its builtin
            kernels (it reads the weights where the file is mapped).
        weight_cache: with "xnnpack", the packed weights' file, written by
            the first process that runs `path` and mapped by the next
            (default `<path>.xnnpack`; None: each signature packs its own
            copy in memory, 1.75 GB resident for SmolLM2 instead of 0.62).
            A cache older than `path` is packed again.

    Attributes:
        buffer_length: the cache's positions.
        prefill_length: the tokens of one `prefill` call.
        vocabulary_size: the logits' length.
    """

    def __init__(self, path, num_threads=None, kernels="xnnpack", weight_cache=""):
        if kernels not in KERNELS:
            raise ValueError(
                f"`kernels` must be one of {KERNELS}. Received: kernels={kernels!r}"
            )
        path, num_threads = Path(path), num_threads or available_cpus()
        interpreter, signatures, self.buffer_length = _interpreter(path, num_threads)
        windows = decode_windows(self.buffer_length or 0)
        expected = {"prefill", "decode", *map(window_signature, windows)}
        if not {"prefill", "decode"} <= set(signatures) or self.buffer_length is None:
            raise ValueError(
                "A LiteRT decoder has the signatures `prefill` and `decode`, "
                "each taking and returning the caches (keras_tfm.export."
                "export_litert_decoder; a file of an older keras-tfm holds its "
                f"cache in variables). Received: a file with {sorted(signatures)}"
            )
        self.prefill_length = int(signatures["prefill"]["token_ids"][1])
        # A file without them (written before windows) decodes through `decode`.
        self._windows = tuple(w for w in windows if window_signature(w) in signatures)
        signatures = {k: v for k, v in signatures.items() if k in expected}
        self._runs, self.model = {}, None
        quiet = contextlib.nullcontext()
        if kernels == "builtin":
            self._caches = {
                key: np.zeros(shape, np.float32)
                for key, shape in signatures["decode"].items()
                if key.startswith(CACHE_PREFIX)
            }
            for name in signatures:
                runner = interpreter.get_signature_runner(name)
                self._runs[name] = functools.partial(self._builtin_run, runner)
        else:
            if weight_cache == "":
                weight_cache = path.with_name(path.name + WEIGHT_CACHE_SUFFIX)
            weight_cache = _fresh_weight_cache(path, weight_cache)
            del interpreter  # only its shapes were needed
            self._caches = None
            # LiteRT logs its environments and accelerators as the model, its
            # buffers and its first run are made, and as the process ends.
            quiet = _stderr_to_devnull()
            with _stderr_to_devnull():
                self.model = _compiled_model(path, num_threads, weight_cache)
                for name in signatures:
                    self._runs[name] = self._compiled_run(name)
            atexit.unregister(_silence_at_exit)  # registered once
            atexit.register(_silence_at_exit)
        with quiet:  # the first run
            self.vocabulary_size = len(self.decode(0, 0))

    def __del__(self):
        # LiteRT logs its accelerators' teardown as the model is freed.
        if getattr(self, "model", None) is not None:
            with _stderr_to_devnull():
                self._runs.clear()
                self._caches = None
                self.model = None

    def _builtin_run(self, runner, **values):
        """A call through LiteRT's builtin kernels: the caches go in and come
        back as NumPy arrays."""
        values = {k: np.asarray(v, np.int32) for k, v in values.items()}
        outputs = runner(**values, **self._caches)
        for key in self._caches:
            self._caches[key] = outputs[key]
        return outputs["logits"][0]

    def _compiled_run(self, name):
        """A call of signature `name` on the compiled model's buffers.

        The caches are one set of LiteRT's own buffers, shared by both
        signatures and bound as each call's inputs and its outputs: a block
        reads its cache only through its own update, so the update writes
        the new positions in place and no cache is copied between calls
        (the tests check the logits against the Keras model's).
        """
        model = self.model
        index = model.get_signature_index(name)
        listed = model.get_signature_list()[name]
        names = listed["inputs"]
        inputs = dict(zip(names, model.create_input_buffers(index), strict=True))
        outputs = dict(
            zip(listed["outputs"], model.create_output_buffers(index), strict=True)
        )
        if self._caches is None:  # made by the first signature, shared
            self._caches = {k: inputs[k] for k in names if k.startswith(CACHE_PREFIX)}
            for buffer in self._caches.values():
                shape = buffer.get_tensor_details()["shape"]
                buffer.write(np.zeros(shape, np.float32))
        caches, logits = self._caches, outputs["logits"]
        size = int(np.prod(logits.get_tensor_details()["shape"]))
        bound_inputs = [caches.get(k, inputs[k]) for k in names]
        bound_outputs = [caches.get(k, outputs[k]) for k in listed["outputs"]]

        def run(**values):
            for key, value in values.items():
                inputs[key].write(np.asarray(value, np.int32))
            model.run_by_index(index, bound_inputs, bound_outputs)
            return logits.read(size, np.float32)

        return run

    def decode(self, token, index):
        """The float32 logits (vocabulary_size,) after `token` at `index`,
        through the smallest window that holds `index` (`decode_windows`)."""
        name = next((window_signature(w) for w in self._windows if index < w), "decode")
        return self._runs[name](token_ids=[[token]], index=index)

    def prefill(self, token_ids, start):
        """The logits after the last of `token_ids`, written at `start ...`.

        Whole chunks go through `prefill`, the last one padded (the padding's
        keys land past the prompt, where no query reads them before decoding
        overwrites them); a tail that a padded chunk would push past the
        buffer goes one token a `decode` call.
        """
        token_ids = [int(t) for t in token_ids]
        if not token_ids or start < 0 or start + len(token_ids) > self.buffer_length:
            raise ValueError(
                f"`token_ids` must be at least one token and fit the buffer of "
                f"{self.buffer_length} positions from `start`. Received: "
                f"{len(token_ids)} tokens, start={start}"
            )
        size, logits = self.prefill_length, None
        done = 0
        while done < len(token_ids):
            index = start + done
            chunk = token_ids[done : done + size]
            if index + size > self.buffer_length and len(chunk) < size:
                for offset, token in enumerate(chunk):
                    logits = self.decode(token, index + offset)
                break
            padded = np.zeros((1, size), np.int32)
            padded[0, : len(chunk)] = chunk
            logits = self._runs["prefill"](
                token_ids=padded, index=index, length=len(chunk)
            )
            done += len(chunk)
        return logits

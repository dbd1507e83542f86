"""`LiteRTDecoder`: a decoding step written by `export_litert_decoder`, run.

The file holds two signatures over one key/value cache kept inside the
interpreter (`keras_tfm.export.litert_decoder`): `prefill`, a chunk of
`prefill_length` tokens (the last chunk padded, its real length given),
and `decode`, one token. Both shapes are static, so the interpreter
allocates once per signature and XNNPACK takes the graph. Imports neither
TensorFlow nor Keras.

Example:
>>> # a file written by keras_tfm.export.export_litert_decoder
>>> decoder = LiteRTDecoder("decoder.tflite")  # doctest: +SKIP
>>> logits = decoder.prefill([1, 2, 3], 0)  # doctest: +SKIP
>>> logits = decoder.decode(int(logits.argmax()), 3)  # doctest: +SKIP
"""

import os

import numpy as np


def available_cpus():
    """The CPUs this process may run on (its affinity, not the machine's)."""
    return len(os.sched_getaffinity(0))


class LiteRTDecoder:
    """A cached decoding step in LiteRT's interpreter.

    Args:
        path: the `.tflite` file.
        num_threads: interpreter threads (default `available_cpus()`).
        xnnpack: run the graph through XNNPACK, LiteRT's default CPU
            delegate (its float32 matrix-vector kernels, and the
            transposes, products and softmax of attention); False:
            LiteRT's builtin kernels. XNNPACK packs the float32 weights
            into its own layout (a second copy in memory).

    Attributes:
        buffer_length: the cache's positions.
        prefill_length: the tokens of one `prefill` call.
    """

    def __init__(self, path, num_threads=None, xnnpack=True):
        from ai_edge_litert.interpreter import Interpreter, OpResolverType

        resolver = OpResolverType.AUTO
        if not xnnpack:
            resolver = OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES
        self.interpreter = Interpreter(
            model_path=str(path),
            num_threads=num_threads or available_cpus(),
            experimental_op_resolver_type=resolver,
        )
        signatures = self.interpreter.get_signature_list()
        if set(signatures) != {"prefill", "decode"}:
            raise ValueError(
                "A LiteRT decoder has the signatures `prefill` and `decode` "
                "(keras_tfm.export.export_litert_decoder). Received: a file "
                f"with {sorted(signatures)}"
            )
        self._prefill = self.interpreter.get_signature_runner("prefill")
        self._decode = self.interpreter.get_signature_runner("decode")
        self.prefill_length = int(
            self._prefill.get_input_details()["token_ids"]["shape"][1]
        )
        variables = [
            tensor["shape"]
            for tensor in self.interpreter.get_tensor_details()
            if len(tensor["shape"]) == 5  # a (1, 2, length, heads, dim) cache
        ]
        self.buffer_length = int(variables[0][2]) if variables else None

    def decode(self, token, index):
        """The float32 logits (vocabulary_size,) after `token` at `index`."""
        return self._decode(
            token_ids=np.asarray([[token]], np.int32),
            index=np.asarray(index, np.int32),
        )["logits"][0]

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
            logits = self._prefill(
                token_ids=padded,
                index=np.asarray(index, np.int32),
                length=np.asarray(len(chunk), np.int32),
            )["logits"][0]
            done += len(chunk)
        return logits

"""`export_litert_decoder`: a `CausalLM`'s cached decoding step as a LiteRT file.

Two signatures with static shapes over one key/value cache: `prefill`
takes `token_ids` int32 (1, `prefill_length`) at positions `index ...`,
of which the first `length` are real (the rest padding), and returns the
float32 logits (1, vocabulary_size) after the last real one; `decode` takes
one token (1, 1) at `index` and returns its logits, and `decode_<window>`
(`decode_64`, `decode_128`, ... below the buffer's length) does the same
for an `index` below `window`, its attention reading the cache's first
`window` positions only (a short conversation's token reads and packs a
fraction of the cache). All of them also take each
block's key/value cache, `cache_000`, `cache_001`, ... (1, 2,
`buffer_length`, kv_heads, head_dim), and return it with the new tokens'
keys and values written; a runtime binds one buffer to a block's cache
input and output, so that the update writes in place and nothing is
copied between calls (`LiteRTDecoder`). Positions past the newest token
may hold padding's keys or stale
keys of an earlier conversation; no query reads them (attention is
causal), and they are overwritten as decoding reaches them. A caller keeps
`index + prefill_length <= buffer_length` for `prefill` (the cache's
update would otherwise be clamped into place): `keras_tfm.lite.
litert_decoder.LiteRTDecoder` runs such a file.

This is what `keras-tfm chat` keeps in its cache folder so that a second
run answers without TensorFlow (`keras_tfm.lite.litert_chat`).

Example:
>>> import tempfile
>>> import keras_tfm
>>> backbone = keras_tfm.models.DecoderBackbone(
...     vocabulary_size=50, num_layers=1, num_heads=2, hidden_dim=16,
...     intermediate_dim=32, max_sequence_length=16)
>>> model = keras_tfm.models.CausalLM(backbone)
>>> size = export_litert_decoder(model, tempfile.mkdtemp() + "/step.tflite")
>>> size > 10_000
True
"""

import functools
import tempfile
from pathlib import Path

import keras
import tensorflow as tf

from keras_tfm.export.litert import QUANTIZATIONS
from keras_tfm.generation.decoder_steps import DecoderSteps
from keras_tfm.kernels.kv_cache import read_window
from keras_tfm.kernels.plain_scope import plain_kernels
from keras_tfm.kernels.rotated_inputs import rotated_down_projections
from keras_tfm.lite import rotation
from keras_tfm.lite.litert_decoder import (
    decode_windows,
    default_prefill_length,
    window_signature,
)
from keras_tfm.models import CausalLM
from keras_tfm.validation import check_choice, check_positive_int

SIGNATURES = ("prefill", "decode")
"""The signatures every step file holds; `decode_<window>` ones beside them
(`decode_windows`)."""


def signature_names(buffer_length):
    """The signatures of a step file with `buffer_length` cache positions."""
    return SIGNATURES + tuple(map(window_signature, decode_windows(buffer_length)))


def cache_name(block):
    """The name of block `block`'s key/value cache, as an input and an output
    of both signatures."""
    return f"cache_{block:03d}"


class _CachedStep(tf.Module):
    """The step functions, their caches passed in and returned.

    Two signatures with static shapes, so that the converter folds every
    shape computation (a `[1, None]` input left SmolLM2's step with 4,374
    operations, 1,400 of them shape arithmetic run at each call) and
    XNNPACK can take the whole graph. Each block's cache is an input and,
    written, an output, bound by the runtime to one buffer
    (`LiteRTDecoder`), where a resource variable would be copied out and
    back at every call.
    """

    def __init__(self, model, buffer_length, prefill_length):
        super().__init__()
        self.steps = DecoderSteps(model)
        # The weights, not the model: tracking the task would bring its
        # tokenizer's lookup tables, which LiteRT's builtin ops cannot hold.
        self.model_variables = list(model.variables)
        self.down_kernels = _rotated_down_kernels(self.steps.blocks)
        caches = [
            tf.TensorSpec(cache.shape, cache.dtype, name=cache_name(i))
            for i, cache in enumerate(self.steps.empty_cache(1, buffer_length))
        ]
        index = tf.TensorSpec([], tf.int32, name="index")
        self.prefill = tf.function(
            self._prefill,
            input_signature=[
                tf.TensorSpec([1, prefill_length], tf.int32, name="token_ids"),
                index,
                tf.TensorSpec([], tf.int32, name="length"),
                *caches,
            ],
        )
        decode = [tf.TensorSpec([1, 1], tf.int32, name="token_ids"), index, *caches]
        self.decode = tf.function(self._decode, input_signature=decode)
        for window in decode_windows(buffer_length):
            step = functools.partial(self._decode, window=window)
            setattr(self, window_signature(window),
                    tf.function(step, input_signature=decode))  # fmt: skip

    def _hidden(self, token_ids, index, caches, window=None):
        """`(hidden states before the final norm, {name: written cache})`;
        attention reads the caches' first `window` positions (None: all)."""
        kernels = {key: (kernel, block) for key, kernel, block in self.down_kernels}
        # Forward only, short chunks (see plain_scope); the down projections
        # read their input rotated (see rotated_inputs).
        with plain_kernels(), rotated_down_projections(kernels), read_window(window):
            hidden, caches = self.steps.hidden(
                token_ids, tuple(caches), index, final_norm=False
            )
        return hidden, {cache_name(i): cache for i, cache in enumerate(caches)}

    def _logits(self, last):
        """Float32 logits (1, vocabulary_size) of one hidden state (1, 1, width).

        The final norm runs here, on the one row, in both signatures: the
        converter then folds its scale into the output matrix the same way
        for both, so they read one matrix (a rotation of the residual
        stream, `keras_tfm.lite.rotation`, needs every norm scale folded).
        """
        norm = self.steps.backbone.final_norm
        last = last if norm is None else norm(last)
        # A squeeze is a RESHAPE; `[:, 0]` was LiteRT's element-by-element
        # STRIDED_SLICE over the whole vocabulary, outside XNNPACK.
        return tf.cast(tf.squeeze(self.steps.model.logits(last), 1), tf.float32)

    def _prefill(self, token_ids, index, length, *caches):
        hidden, caches = self._hidden(token_ids, index, caches)
        last = tf.gather(hidden, [length - 1], axis=1)  # the last real token
        return {"logits": self._logits(last), **caches}

    def _decode(self, token_ids, index, *caches, window=None):
        hidden, caches = self._hidden(token_ids, index, caches, window)
        return {"logits": self._logits(hidden), **caches}


def _rotated_down_kernels(blocks):
    """`[(id(output dense), variable, block)]`: each feed-forward's down
    projection kernel rotated for an input rotated in blocks
    (`keras_tfm.lite.rotation.block_hadamard_rows`, computed in NumPy so
    that a template fills the same bits); float kernels only. (A list: a
    `tf.Module` tracks it, and would refuse a dict with integer keys.)"""
    kernels = []
    for block in blocks:
        dense = getattr(getattr(block, "feed_forward", None), "output_dense", None)
        kernel = getattr(dense, "kernel", None)
        if kernel is None or not str(kernel.dtype).startswith("float"):
            continue
        rows = rotation.rows_block(int(kernel.shape[0]))
        if rows > 1:
            value = keras.ops.convert_to_numpy(kernel)
            value = rotation.block_hadamard_rows(value, rows)
            kernels.append((id(dense), tf.Variable(value, trainable=False), rows))
    return kernels


def save_decoder_step(model, folder, buffer_length=None, prefill_length=None):
    """Writes `model`'s cached decoding step as a SavedModel (for the converter).

    Args: as `export_litert_decoder`; `folder` is the SavedModel's folder.
    """
    if not isinstance(model, CausalLM) or not callable(
        getattr(model.backbone, "embed", None)
    ):
        raise ValueError(
            "export_litert_decoder takes a decoder-only CausalLM. Received: "
            f"a {type(model).__name__}"
        )
    limit = model.backbone.max_sequence_length
    buffer_length = limit if buffer_length is None else buffer_length
    check_positive_int("buffer_length", buffer_length)
    if buffer_length > limit:
        raise ValueError(
            f"`buffer_length` must be at most the model's max_sequence_length "
            f"({limit}). Received: buffer_length={buffer_length}"
        )
    prefill_length = prefill_length or default_prefill_length(buffer_length)
    check_positive_int("prefill_length", prefill_length)
    if prefill_length > buffer_length:
        raise ValueError(
            "`prefill_length` must be at most `buffer_length` "
            f"({buffer_length}). Received: prefill_length={prefill_length}"
        )
    # Through a SavedModel written by Keras' ExportArchive: the converter
    # freezes the weights it tracks.
    cached = _CachedStep(model, buffer_length, prefill_length)
    archive = keras.export.ExportArchive()
    archive.track(cached)
    for name in signature_names(buffer_length):
        archive.add_endpoint(name, getattr(cached, name))
    archive.write_out(str(folder), verbose=False)


def _step_signatures(folder):
    """The step's signatures in the SavedModel in `folder`, read from its
    proto: those `save_decoder_step` added (`signature_names`)."""
    from tensorflow.core.protobuf import saved_model_pb2

    saved = saved_model_pb2.SavedModel.FromString(
        (Path(folder) / "saved_model.pb").read_bytes()
    )
    names = saved.meta_graphs[0].signature_def
    # Not `serving_default` (an alias) nor `__saved_model_init_op`.
    return [n for n in names if n in SIGNATURES or n.startswith(window_signature(""))]


def convert_decoder_step(folder):
    """The float32 `.tflite` bytes of a step `save_decoder_step` wrote to
    `folder`."""
    converter = tf.lite.TFLiteConverter.from_saved_model(
        str(folder), _step_signatures(folder)
    )
    # Large constants written after the flatbuffer instead of inside it (a
    # private switch, no public one exists): SmolLM2's conversion peaked at
    # 4.6 GB instead of 5.7 GB and took 15.8 s instead of 22.2 s, the same
    # file contents to LiteRT (bit-identical logits, the same load time).
    converter._experimental_use_buffer_offset = True
    return converter.convert()


def export_litert_decoder(
    model,
    path,
    buffer_length=None,
    quantization="float32",
    prefill_length=None,
    template=None,
):
    """Writes `model`'s cached decoding step as a `.tflite` file.

    Args:
        model: a decoder-only `keras_tfm.models.CausalLM`.
        path: the file to write.
        buffer_length: positions of the key/value cache (the prompt and the
            answer together); default the model's `max_sequence_length`.
        quantization: "float32", or "int8": the query, gate/up,
            attention-output and output matrices int8 with one scale per
            output channel, run on activations quantized per row (XNNPACK's
            `qd8`), the others float32 (`keras_tfm.lite.quantized_step`).
        prefill_length: positions of a `prefill` call (default
            `keras_tfm.lite.litert_decoder.PREFILL_LENGTH`, at most
            `buffer_length`).
        template: a step template made for `model`'s weights and these
            lengths (`keras_tfm.lite.decoder_template`; SmolLM2's preset
            keeps one): the file is filled from it in seconds instead of
            converted, and with "int8" the residual stream is rotated first
            (`keras_tfm.lite.rotation`), which keeps the int8 step within
            llama.cpp's quality gate.

    Returns:
        The number of bytes written.
    """
    from keras_tfm.lite import decoder_template, quantized_step

    check_choice("quantization", quantization, QUANTIZATIONS)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if template is not None:
        kept = decoder_template.read_description(template) or {}
        asked = buffer_length or model.backbone.max_sequence_length
        if kept.get("buffer_length") != asked:
            raise ValueError(
                f"The template in {template} holds a step of "
                f"{kept.get('buffer_length')} positions. Received: "
                f"buffer_length={asked}"
            )
        weights = {variable.path: variable for variable in model.weights}
        if quantization == "int8":
            return quantized_step.write_quantized_step(template, weights, path)
        return decoder_template.fill_template(template, weights, path)
    with tempfile.TemporaryDirectory() as folder:
        save_decoder_step(model, folder, buffer_length, prefill_length)
        flatbuffer = convert_decoder_step(folder)
        if quantization == "float32":
            path.write_bytes(flatbuffer)
            return len(flatbuffer)
        converted = Path(folder) / "float32.tflite"
        converted.write_bytes(flatbuffer)
        del flatbuffer
        return quantized_step.quantize_step(converted, path)

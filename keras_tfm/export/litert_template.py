"""`make_decoder_template`: a model's LiteRT decoding step as a template.

The template (`keras_tfm.lite.decoder_template`) is the converter's
`.tflite` file of `export_litert_decoder` with the bytes that come from the
weights left out and placed back by `fill_template` without TensorFlow.
Which bytes are the weights' is found on random weights, where no two
weights are alike (real ones may be: zero biases, unit scales, which the
converter would merge or fold away): each buffer of the converted file is
matched to a weight, transposed, or to a matrix times a normalisation's
scale (the converter folds RMSNorm's scale into the next projection). The
template filled with other random weights must then give, bit for bit, the
logits of their own conversion (a whole prefill chunk, a padded one, then
a few tokens one at a time), or no template is made.
(Their files differ in layout: the converter orders the buffers, and names
some tensors, differently from one conversion to the next.)

Which steps a template can hold is found out, not assumed: SmolLM2's
(Llama: RMSNorm, rotary positions, SwiGLU, no biases) can; a GPT-2-style
step (LayerNorm, biases, learned positions) cannot: there the converter
folds the query projection's weights with others in a way no placement
computes, and `make_decoder_template` refuses it.

Example:
>>> import tempfile
>>> import keras_tfm
>>> backbone = keras_tfm.models.DecoderBackbone(
...     vocabulary_size=50, num_layers=1, num_heads=2, hidden_dim=16,
...     intermediate_dim=32, max_sequence_length=16, activation="swiglu",
...     normalization="rms_norm", position_encoding="rotary", use_bias=False)
>>> model = keras_tfm.models.CausalLM(backbone)
>>> folder = tempfile.mkdtemp() + "/litert_decoder"
>>> make_decoder_template(model, folder)["buffer_length"]
16
"""

import contextlib
import hashlib
import itertools
import shutil
import tempfile
from pathlib import Path

import numpy as np

from keras_tfm.export.litert_decoder import convert_decoder_step, save_decoder_step
from keras_tfm.lite import decoder_template, quantized_step, rotation
from keras_tfm.lite.litert_decoder import LiteRTDecoder, default_prefill_length
from keras_tfm.saving import atomic_directory


def _random_weights(model, seed):
    """Weight path -> distinct random float32 values of each weight's shape;
    vectors (scales) near 1, as normalisations hold them."""
    generator = np.random.default_rng(seed)
    weights = {}
    for variable in model.weights:
        shape = tuple(variable.shape)
        if len(shape) == 1:
            value = generator.uniform(0.5, 1.5, shape)
        else:
            value = generator.normal(0.0, 0.05, shape)
        weights[variable.path] = value.astype(np.float32)
    return weights


def _converted(model, weights, settings):
    """The `.tflite` bytes of `model`'s step with `weights` assigned."""
    for variable in model.weights:
        variable.assign(weights[variable.path])
    with tempfile.TemporaryDirectory() as folder:
        save_decoder_step(model, folder, **settings)
        return convert_decoder_step(folder)


def _buffers(flatbuffer):
    """`(offset, size, shape)` of each non-empty buffer of a `.tflite` file
    (shape: of the first tensor that reads it)."""
    from ai_edge_litert import schema_py_generated as schema

    model = schema.Model.GetRootAsModel(flatbuffer, 0)
    shapes = {}
    for s in range(model.SubgraphsLength()):
        graph = model.Subgraphs(s)
        for t in range(graph.TensorsLength()):
            tensor = graph.Tensors(t)
            shapes.setdefault(tensor.Buffer(), tuple(tensor.ShapeAsNumpy().tolist()))
    found = []
    for i in range(model.BuffersLength()):
        buffer = model.Buffers(i)
        if buffer.Offset() > 1:  # stored after the flatbuffer
            found.append((buffer.Offset(), buffer.Size(), shapes.get(i)))
        elif buffer.DataLength():
            start = buffer._tab.Vector(buffer._tab.Offset(4))  # the data vector
            found.append((start, buffer.DataLength(), shapes.get(i)))
    return found


def _logits(path, prefill_length, buffer_length, vocabulary_size):
    """A step file's logits for random tokens: a whole prefill chunk, a
    padded one, then a token a call (LiteRT's builtin kernels: the same
    operations on the same values give the same bits)."""
    decoder = LiteRTDecoder(path, num_threads=1, kernels="builtin")
    ids = np.random.default_rng(0).integers(0, vocabulary_size, buffer_length)
    ids = [int(i) for i in ids]
    whole = min(prefill_length, buffer_length // 2)
    logits = [decoder.prefill(ids[:whole], 0)]
    logits.append(decoder.prefill(ids[whole : whole + 2], whole))
    end = min(whole + 6, buffer_length)
    logits += [decoder.decode(ids[i], i) for i in range(whole + 2, end)]
    return np.stack(logits)


def _digest(value):
    return hashlib.sha256(np.ascontiguousarray(value).tobytes()).digest()


def _placements(flatbuffer, weights):
    """The placements that explain `flatbuffer`'s buffers from `weights`."""
    whole = {}
    for path, value in weights.items():
        for axes in itertools.permutations(range(value.ndim)):
            whole.setdefault(_digest(value.transpose(axes)), (path, list(axes), None))
        rows = rotation.rows_block(value.shape[0]) if value.ndim == 2 else 1
        if path.endswith(rotation.DOWN_PROJECTION) and rows > 1:
            rotated = rotation.block_hadamard_rows(value, rows)
            for axes in ([0, 1], [1, 0]):
                key = _digest(rotated.transpose(axes))
                whole.setdefault(key, (path, axes, rows))
    vectors = {p: v for p, v in weights.items() if v.ndim == 1}
    placements = []
    for offset, size, shape in _buffers(flatbuffer):
        data = flatbuffer[offset : offset + size]
        match = whole.get(hashlib.sha256(data).digest())
        if match is not None:
            path, axes, rows = match
            placements.append([offset, path, axes, None, rows])
            continue
        if not shape or len(shape) != 2 or size != 4 * np.prod(shape):
            continue
        scaled = _scaled_match(
            np.frombuffer(data, np.float32).reshape(shape), weights, vectors
        )
        if scaled is not None:
            placements.append([offset, *scaled, None])
    return placements


def _scaled_match(value, weights, vectors):
    """`(matrix path, axes, scale path)` with `value` = the matrix
    transposed by `axes` times the scale along the last axis, or None."""
    for path, matrix in weights.items():
        for axes in ([0, 1], [1, 0]) if matrix.ndim == 2 else ():
            candidate = matrix.transpose(axes)
            if candidate.shape != value.shape:
                continue
            with np.errstate(divide="ignore", invalid="ignore"):
                ratio = value[0] / candidate[0]
            for scale_path, scale in vectors.items():
                if scale.shape == ratio.shape and np.allclose(ratio, scale, rtol=1e-5):
                    if np.array_equal(candidate * scale, value):
                        return path, axes, scale_path
    return None


def make_decoder_template(
    model, folder, buffer_length=None, prefill_length=None, seed=0, overwrite=False
):
    """Writes the template of `model`'s LiteRT decoding step into `folder`.

    Converts the step twice (about two minutes and 10 GB for SmolLM2): once
    to make the template, once to check it (`check_decoder_template`). The
    model's weights are put back afterwards.

    Args:
        model: a decoder-only `keras_tfm.models.CausalLM`.
        folder: where the template goes.
        buffer_length, prefill_length: as `export_litert_decoder`'s.
        seed: of the random weights (the check's are `seed + 1`).
        overwrite: whether a template already in `folder` may be replaced
            (`folder` keeps its files if this raises); its int8 choice
            (`keras_tfm.lite.quantized_step.QUANTIZATION`) is kept.

    Returns:
        The template's description (`template.json`).

    Raises:
        ValueError: if the check fails (the converter did something a
            placement cannot say); no template is written.
    """
    limit = model.backbone.max_sequence_length
    buffer_length = limit if buffer_length is None else buffer_length
    prefill_length = prefill_length or default_prefill_length(buffer_length)
    settings = {"buffer_length": buffer_length, "prefill_length": prefill_length}
    with _weights_kept(model), atomic_directory(folder, overwrite=overwrite) as work:
        first = _random_weights(model, seed)
        flatbuffer = _converted(model, first, settings)
        placements = _placements(flatbuffer, first)
        decoder_template.write_template(work, flatbuffer, placements, first, settings)
        del flatbuffer
        chosen = Path(folder) / quantized_step.QUANTIZATION
        if chosen.is_file():  # a measured choice of the folder's, not made here
            shutil.copy2(chosen, work / chosen.name)
        check_decoder_template(model, work, seed + 1)
    return decoder_template.read_description(folder)


def check_decoder_template(model, folder, seed=1):
    """Checks the template in `folder` against the converter, as it is now.

    The template filled with random weights must give, bit for bit, the
    logits of those weights' own conversion. The model's weights are put
    back afterwards.

    Raises:
        ValueError: if it does not.
    """
    description = decoder_template.read_description(folder)
    settings = {k: description[k] for k in ("buffer_length", "prefill_length")}
    shapes = (
        settings["prefill_length"],
        settings["buffer_length"],
        model.backbone.vocabulary_size,
    )
    weights = _random_weights(model, seed)
    with _weights_kept(model), tempfile.TemporaryDirectory() as scratch:
        filled, converted = Path(scratch, "filled"), Path(scratch, "converted")
        decoder_template.fill_template(folder, weights, filled)
        converted.write_bytes(_converted(model, weights, settings))
        if not np.array_equal(_logits(filled, *shapes), _logits(converted, *shapes)):
            raise ValueError(
                "The converter's file depends on the weights in a way the "
                f"template in {folder} does not hold"
            )


@contextlib.contextmanager
def _weights_kept(model):
    """Puts `model`'s weights back as they were when the block ends."""
    original = {variable.path: variable.numpy() for variable in model.weights}
    try:
        yield
    finally:
        for variable in model.weights:
            variable.assign(original[variable.path])

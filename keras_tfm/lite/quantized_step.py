"""The LiteRT decoding step with int8 weights, written from a template.

`write_quantized_step` fills a step template (`keras_tfm.lite.
decoder_template`) with the weights' residual stream rotated (`keras_tfm.
lite.rotation`: exact in float, and it spreads the stream's outlier
channels), then quantizes it with Google's `ai-edge-quantizer` (a
maintained quantizer for LiteRT files, NumPy only): the matrices named in
`INT8_MATRICES` become int8 with one scale per output channel, and
XNNPACK runs them on the float activations quantized per row
(`qd8-f32-qc8w`); the others stay float32.

Which matrices is measured, not guessed (`benchmarks/quantized_quality.py`,
each kind quantized alone over the same 1,024 tokens of text, mean KL
against the float32 step). The feed-forward's down projection reads the
gated activation, whose few channels a hundred times the median a per-row
int8 scale crushes; the step rotates that input in blocks of 64 channels
as it runs (`keras_tfm.kernels.rotated_inputs`, a 64 x 64 Hadamard
product), which spreads them, and its matrix is int8 too (a preset's
template may keep a few layers' float32: `QUANTIZATION`). The key/value
projection (its errors move every attention score, and they come from its
weights' rounding, not the activations') stays float32. The mode then
passes the quality gate (mean KL <= 0.01, top-1 agreement >= 0.95), where
quantizing every matrix does not; docs/benchmarks/decoding.md has the table.

Example (SmolLM2's template, its weights converted from the GGUF file):
>>> from keras_tfm import zoo
>>> from keras_tfm.chat.entry_writer import template_folder
>>> from keras_tfm.lite.litert_decoder import LiteRTDecoder
>>> llm = zoo.from_preset("smollm2_135m_instruct")  # doctest: +SKIP
>>> weights = {v.path: v for v in llm.weights}  # doctest: +SKIP
>>> write_quantized_step(template_folder("smollm2_135m_instruct"), weights,
...                      "int8.tflite")  # doctest: +SKIP
353302848
>>> LiteRTDecoder("int8.tflite").decode(1, 0).shape  # doctest: +SKIP
(49152,)
"""

import contextlib
import io
import json
import os
import tempfile
from pathlib import Path

from keras_tfm.lite import decoder_template, rotation

MODES = ("int8",)
"""The quantized steps `write_quantized_step` writes."""

INT8_MATRICES = (
    r".*(query|intermediate|attention_output)_\d+/.*|.*/rotated_output/.*"
    r"|.*token_embedding.*"
)
"""The `FULLY_CONNECTED` operations whose weights become int8, by their
output tensors' names (the converter names them after the Keras layers):
the query, gate/up, attention-output and down projections (the down ones
read their input rotated: `rotated_output`) and the output matrix; not
the key/value projections."""

ROTATION_SEED = 0

QUANTIZATION = "quantization.json"
"""A template's own choice, in its folder: `{"float32_matrices": regex}`,
operations kept float32 beside the key/value projections (measured per
preset: SmolLM2 keeps the down projections of the four layers whose int8
costs the most KL)."""


def int8_matrices(template):
    """The regular expression of the int8 matrices of `template`'s step:
    `INT8_MATRICES`, less the template's `float32_matrices` if it names
    any (`QUANTIZATION`)."""
    try:
        chosen = json.loads((Path(template) / QUANTIZATION).read_text())
    except FileNotFoundError:
        return INT8_MATRICES
    kept = chosen["float32_matrices"]
    # The quantizer searches (re.search): anchored, the exclusion holds.
    return f"^(?!.*(?:{kept}))(?:{INT8_MATRICES})"


def quantize_step(float_path, path, matrices=INT8_MATRICES):
    """Writes `float_path` (a float32 step file) to `path` with the
    `FULLY_CONNECTED` weights whose output names match `matrices` (a
    regular expression) in int8; returns the bytes written."""
    from ai_edge_quantizer import qtyping, recipe_manager

    recipe = recipe_manager.RecipeManager()
    recipe.add_dynamic_config(
        regex=matrices,
        operation_name=qtyping.TFLOperationName.FULLY_CONNECTED,
        num_bits=8,
    )
    return quantize_with_recipe(float_path, path, recipe)


def quantize_with_recipe(float_path, path, recipe, calibration=None):
    """Writes `float_path` to `path` quantized by `recipe` (an
    `ai_edge_quantizer.recipe_manager.RecipeManager`), with `calibration`'s
    statistics if given; returns the bytes written."""
    from ai_edge_quantizer import quantizer

    # The quantizer prints its progress bars and timings on stdout/stderr.
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(
        io.StringIO()
    ):
        result = quantizer.Quantizer(
            str(float_path), recipe.get_quantization_recipe()
        ).quantize(calibration)
        result.export_model(str(path), overwrite=True)
    return Path(path).stat().st_size


def write_quantized_step(template, weights, path, mode="int8"):
    """Writes the `mode` step of the template in `template` with `weights`.

    Args:
        template: a step template's folder (`keras_tfm.lite.decoder_template`).
        weights: weight path -> float32 array or Keras variable, the
            template's.
        path: the `.tflite` file to write.
        mode: one of `MODES`.

    Returns:
        The number of bytes written. The float32 step goes through a
        temporary file beside `path` (SmolLM2's: 650 MB, for a few seconds).
    """
    if mode not in MODES:
        raise ValueError(f"`mode` must be one of {MODES}. Received: mode={mode!r}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, float_path = tempfile.mkstemp(suffix=".tflite", dir=path.parent)
    os.close(handle)
    try:
        write_rotated_step(template, weights, float_path)
        return quantize_step(float_path, path, int8_matrices(template))
    finally:
        Path(float_path).unlink(missing_ok=True)


def write_rotated_step(template, weights, path):
    """Writes the float32 step of the template in `template` with `weights`'
    residual stream rotated (`keras_tfm.lite.rotation`): the same logits as
    the plain step up to float rounding; returns the bytes written."""
    description = decoder_template.read_description(template)
    if description is None:
        raise ValueError(f"{template} holds no decoder template")
    width = description["shapes"][rotation.EMBEDDING][1]
    values = rotation.rotated_values(
        weights, rotation.residual_rotation(width, ROTATION_SEED)
    )
    return decoder_template.fill_template(template, weights, path, values)

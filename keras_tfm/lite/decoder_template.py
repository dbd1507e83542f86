"""A LiteRT decoding step without its weights, filled in without TensorFlow.

Converting SmolLM2's decoding step to LiteRT takes TensorFlow's converter
about a minute and 5 GB of memory; what it produces depends on the weights
only through the bytes of some buffers. A template is that file with those
bytes left out, and a list of placements saying which weight goes where:

- `template.json`: the format, the step's `buffer_length` and
  `prefill_length`, the total file size, each weight's shape, and the
  placements `[offset, weight path, axes, scale path or null, rows block
  or null]`: the bytes of `weight.transpose(axes)`, times the vector
  `scale` along the last axis when the converter folded a normalisation's
  scale into a matrix, written at `offset`; with a rows block, the weight
  is first rotated as the step's down projections read it
  (`keras_tfm.lite.rotation.block_hadamard_rows`);
- `template.bin.gz`: every byte of the file outside the placements (the
  graph, the cache's initial value, the conversion metadata), gzip-ed.

`keras_tfm.export.litert_template.make_decoder_template` makes one (with
TensorFlow, from two conversions of random weights: one gives the
placements, the other checks that a fill gives its converted bytes exactly),
`tools/make_litert_templates.py` keeps them beside the presets, and
`fill_template` writes the `.tflite` file from a model's weights in about a
second: NumPy computes the folded products with the same float32
multiplications as the converter, so the file is byte-for-byte the
converter's.

Example:
>>> import tempfile
>>> folder = Path(tempfile.mkdtemp())
>>> weights = {"w": np.arange(6, dtype="float32").reshape(2, 3),
...            "s": np.full(2, 2.0, "float32")}
>>> write_template(folder, b"head" + bytes(24) + b"tail",
...                [[4, "w", [1, 0], "s", None]], weights, {"buffer_length": 8})
>>> size = fill_template(folder, weights, folder / "step.tflite")
>>> data = (folder / "step.tflite").read_bytes()
>>> data[:4], np.frombuffer(data[4:28], "float32").tolist(), data[28:]
(b'head', [0.0, 6.0, 2.0, 8.0, 4.0, 10.0], b'tail')
"""

import gzip
import json
from pathlib import Path

import numpy as np

from keras_tfm.lite import rotation

FORMAT = 2
"""Bumped whenever what a template holds, or how it is read, changes."""

DESCRIPTION, BYTES = "template.json", "template.bin.gz"


def placed_values(weights):
    """`(weight, axes, scale, rows) -> array`: what a placement writes,
    `weights[weight]` (rotated in blocks of `rows` rows if `rows` is set)
    transposed by `axes`, times `weights[scale]` along the last axis if
    `scale` is set."""

    def placed(weight, axes, scale, rows):
        value = np.asarray(weights[weight], dtype=np.float32)
        if rows:
            value = rotation.block_hadamard_rows(value, rows)
        value = value.transpose(axes)
        if scale is not None:
            value = value * np.asarray(weights[scale], dtype=np.float32)
        return value

    return placed


def _spans(placements, shapes):
    """`(offset, size)` of each placement, in file order."""
    return sorted(
        (offset, 4 * int(np.prod(shapes[weight], dtype=np.int64)))
        for offset, weight, *_ in placements
    )


def write_template(folder, flatbuffer, placements, weights, settings):
    """Writes a template of `flatbuffer` into `folder`.

    Args:
        folder: the template's folder (created if missing).
        flatbuffer: the converted `.tflite` bytes.
        placements: `[offset, weight path, axes, scale path or None, rows
            block or None]` for each span of `flatbuffer` that comes from
            the weights.
        weights: weight path -> array (their shapes are recorded).
        settings: the step's settings (`buffer_length`, `prefill_length`),
            recorded as they are.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    shapes = {path: list(np.shape(value)) for path, value in weights.items()}
    kept, position = [], 0
    for offset, size in _spans(placements, shapes):
        if offset < position:
            raise ValueError(f"Placements overlap at byte {offset}")
        kept.append(flatbuffer[position:offset])
        position = offset + size
    kept.append(flatbuffer[position:])
    description = {
        "format": FORMAT,
        **settings,
        "size": len(flatbuffer),
        "shapes": shapes,
        "placements": [list(p) for p in placements],
    }
    (folder / DESCRIPTION).write_text(json.dumps(description, indent=1) + "\n")
    # mtime=0: the same template is the same file.
    with open(folder / BYTES, "wb") as raw:
        with gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=9, mtime=0) as out:
            out.write(b"".join(kept))


def read_description(folder):
    """A template's `template.json`, or None if `folder` holds no template of
    this `FORMAT`."""
    try:
        description = json.loads((Path(folder) / DESCRIPTION).read_text())
    except (OSError, ValueError):
        return None
    return description if description.get("format") == FORMAT else None


def fits(description, weights):
    """Whether `weights` (path -> array or variable) are the template's,
    shape for shape."""
    shapes = description["shapes"]
    return shapes.keys() == weights.keys() and all(
        [int(n) for n in weights[path].shape] == shape for path, shape in shapes.items()
    )


def fill_template(folder, weights, path, values=None):
    """Writes the `.tflite` file of the template in `folder` with `weights`.

    Args:
        folder: a template's folder (`write_template`).
        weights: weight path -> float32 array (or Keras variable: each is
            read as it is placed), the shapes the template records.
        path: the file to write.
        values: `(weight, axes, scale, rows) -> array` of each placement
            (default `placed_values(weights)`; `keras_tfm.lite.rotation`
            gives the weights with the residual stream rotated).

    Returns:
        The number of bytes written.
    """
    description = read_description(folder)
    if description is None:
        raise ValueError(f"{folder} holds no decoder template of format {FORMAT}")
    if not fits(description, weights):
        raise ValueError(
            f"The weights are not the ones the template in {folder} was made "
            "for (names and shapes differ)"
        )
    placements = {p[0]: p for p in description["placements"]}
    values = values or placed_values(weights)
    with gzip.open(Path(folder) / BYTES, "rb") as kept, open(path, "wb") as out:
        position = 0
        for offset, size in _spans(placements.values(), description["shapes"]):
            out.write(kept.read(offset - position))
            _, weight, axes, scale, rows = placements[offset]
            value = np.asarray(values(weight, axes, scale, rows), dtype=np.float32)
            if value.nbytes != size:
                raise ValueError(
                    f"A placement of {weight!r} gives {value.nbytes} bytes; "
                    f"the template in {folder} holds {size} there"
                )
            out.write(np.ascontiguousarray(value).tobytes())
            position = offset + size
        out.write(kept.read())
        written = out.tell()
    if written != description["size"]:
        Path(path).unlink()
        raise ValueError(
            f"The template in {folder} is damaged: it filled {written} bytes "
            f"of {description['size']}"
        )
    return written

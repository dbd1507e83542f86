"""An orthogonal rotation of a decoder's residual stream, folded into its weights.

XNNPACK runs an int8 or int4 `FULLY_CONNECTED` on float inputs by quantizing
each row of activations to int8 (`qd8`). A Llama's residual stream has a
few channels hundreds of times larger than the rest, and one scale per row
then leaves the other channels a handful of levels. Rotating the stream by
an orthogonal matrix `Q` spreads those channels over all of them, and
changes nothing in float arithmetic (QuaRot, Ashkboos et al. 2024;
SpinQuant): RMSNorm without its scale is rotation-invariant
(`rms(h Q) = rms(h)`), so with every norm's scale `g` folded into the
matrix that reads it,

- the embedding table becomes `E Q` (the stream starts rotated);
- a matrix reading a norm's output, `x @ W`, becomes `Q^T diag(g) W`;
- a matrix writing into the stream (attention output, feed-forward
  output), `a @ W`, becomes `W Q`;
- the output matrix, `diag(g) E^T`, becomes `Q^T diag(g) E^T`.

The rotation is applied to a LiteRT step template's placements
(`keras_tfm.lite.decoder_template`), whose converter already folds each
norm's scale into the next matrix: the rotated weights fill the same
template, the norms' own scales become ones. `Q` is a random orthogonal
matrix of the small factor of the width, Kronecker times a randomized
Hadamard matrix of its largest power-of-two factor (QuaRot's construction
where the width is not a power of two).

Example:
>>> q = residual_rotation(12, seed=0)
>>> bool(np.allclose(q @ q.T, np.eye(12)))
True
>>> weights = {"e": np.ones((3, 12), "float32"), "s": np.full(12, 2.0, "float32")}
>>> values = rotated_values(weights, q, embedding="e")
>>> head = values("e", [0, 1], "s", None)    # the output matrix, rotated
>>> bool(np.allclose(head @ q.T, 2 * weights["e"]))
True
"""

import math

import numpy as np


def _hadamard(size):
    """The normalized Sylvester Hadamard matrix of a power-of-two `size`."""
    matrix = np.ones((1, 1))
    while matrix.shape[0] < size:
        matrix = np.block([[matrix, matrix], [matrix, -matrix]])
    return matrix / np.sqrt(size)


def residual_rotation(width, seed=0):
    """An orthogonal (width, width) float64 matrix: a random orthogonal
    matrix of `width / 2**k` Kronecker times a Hadamard matrix of `2**k`
    (the largest power of two dividing `width`) with random signs."""
    generator = np.random.default_rng(seed)
    power = width & -width  # the largest power of two dividing width
    small, _ = np.linalg.qr(generator.normal(size=(width // power,) * 2))
    signs = generator.choice([-1.0, 1.0], power)
    return np.kron(small, _hadamard(power) * signs)


DOWN_BLOCK = 64
"""The feed-forward's down projection reads its input rotated in blocks of
at most this many channels (`rows_block`): the gated activation's outlier
channels, which no offline rotation reaches, spread over their block."""


def rows_block(rows):
    """The block of a down projection with `rows` input channels: the
    largest power of two dividing `rows`, at most `DOWN_BLOCK` (1: none)."""
    return math.gcd(rows, DOWN_BLOCK)


def block_hadamard_rows(matrix, block):
    """`H^T @ matrix` for the block-diagonal normalized Hadamard matrix `H`
    with blocks of `block` rows, in float32: what a matrix becomes when its
    input is multiplied by `H` (`x @ W == (x @ H) @ (H^T @ W)`). Computed in
    float64 and rounded once, so that every caller gets the same bits."""
    matrix = np.asarray(matrix, dtype=np.float64)
    rows = matrix.shape[0]
    blocks = matrix.reshape(rows // block, block, -1)
    return (_hadamard(block).T @ blocks).reshape(matrix.shape).astype(np.float32)


def block_hadamard(block):
    """The normalized (block, block) Hadamard matrix as float32 (its entries
    are +-2**-k for a block of 4**k: exact)."""
    return _hadamard(block).astype(np.float32)


DOWN_PROJECTION = "feed_forward/output/kernel"
"""A decoder block's down projection (its feed-forward output)."""

WRITERS = ("attention_output/kernel", DOWN_PROJECTION)
"""The kernels whose outputs are added to the residual stream."""

EMBEDDING = "token_embedding/embeddings"
"""A decoder's (tied) token embedding: the lookup table and output matrix."""


def rotated_values(weights, rotation, embedding=EMBEDDING):
    """`(weight, axes, scale, rows) -> float32 array`: a template
    placement's values with the residual stream rotated by `rotation`.

    Args:
        weights: weight path -> array (or Keras variable).
        rotation: an orthogonal (width, width) matrix (`residual_rotation`).
        embedding: the path of the (tied) token embedding: a placement of it
            without a scale is the lookup table, with one the output matrix.

    Raises:
        ValueError: for a placement that is none of those (a bias, a
            position table: a rotation would not be exact).
    """

    def value(path):
        return np.asarray(weights[path], dtype=np.float64)

    def placed(weight, axes, scale, rows=None):
        matrix = value(weight)
        if rows:  # read by an input rotated in blocks (see block_hadamard_rows)
            matrix = block_hadamard_rows(matrix, rows).astype(np.float64)
        if weight == embedding:
            if scale is None:  # the lookup table, (vocabulary, width)
                rotated = matrix @ rotation
            else:  # the output matrix, (vocabulary, width) in the file
                rotated = (matrix * value(scale)) @ rotation
                axes = [0, 1]
        elif weight.endswith("norm/scale"):
            rotated = np.ones_like(matrix)  # folded into the matrices it feeds
        elif scale is not None:  # reads a norm's output: x @ W
            rotated = rotation.T @ (value(scale)[:, None] * matrix)
        elif weight.endswith(WRITERS):
            rotated = matrix @ rotation
        else:
            raise ValueError(
                f"Cannot rotate the residual stream through {weight!r}: only "
                "norm scales, the matrices around them and the embedding are "
                "rotated exactly"
            )
        return np.ascontiguousarray(rotated.transpose(axes), dtype=np.float32)

    return placed

"""Structured pruning of an encoder: whole attention heads and FFN units.

A head h of a block contributes `head_h W_O^h` to the attention output, and
a feed-forward unit k contributes `act(x W_1[:, k] + b_1[k]) W_2[k, :]`.
Give each a gate xi (1 in the model as it is); its importance is how much
the loss moves with the gate (Michel, Levy and Neubig, 2019, "Are Sixteen
Heads Really Better than One?"):

    I_h = E_batches | dL / d xi_h |,
    dL / d xi_h = sum_{i in rows of head h, j} W_O[i, j] * dL/dW_O[i, j]

(the gate scales the rows of the output projection that read the head, so
the derivative is read off the gradient of that kernel; for an FFN unit, off
the gradient of `W_2`). `method="magnitude"` ranks instead by the L2 norm
of every weight the head (its query, key, value columns and output rows) or
the unit (its `W_1` column, bias and `W_2` row) owns.

`prune_heads` and `prune_ffn` return a new, smaller dense model (fewer
heads or a narrower FFN per layer: `EncoderBackbone`'s
`num_heads_per_layer` and `intermediate_dim_per_layer`) holding the
original's weights without the removed slices; it computes what the
original computes with those heads' or units' outputs set to zero.

Example:
>>> backbone = keras_tfm.models.EncoderBackbone(
...     vocabulary_size=50, num_layers=2, num_heads=4, hidden_dim=16,
...     intermediate_dim=32, max_sequence_length=8, num_segments=0)
>>> model = keras_tfm.models.EncoderClassifier(backbone, 3, pooling="mean")
>>> data = [(np.array([[2, 5, 7, 0], [3, 4, 0, 0]]), np.array([0, 2]))]
>>> from keras_tfm.training import pruning
>>> scores = pruning.head_importance(model, data)
>>> [s.shape for s in scores]
[(4,), (4,)]
>>> heads = pruning.least_important(scores, 0.5)
>>> small = pruning.prune_heads(model, heads)
>>> small.backbone.num_heads_per_layer
(2, 2)
>>> small = pruning.prune_ffn(small, pruning.least_important(
...     pruning.ffn_importance(small, data), 0.25))
>>> sum(small.backbone.intermediate_dim_per_layer)  # 64 - 25% of 64
48
"""

import keras
import numpy as np

from keras_tfm._optional import tensorflow as tf
from keras_tfm.kernels.activations import GATED_ACTIVATIONS
from keras_tfm.models.encoder_backbone import EncoderBackbone
from keras_tfm.validation import check_choice

METHODS = ("gradient", "magnitude")


def _backbone(model):
    backbone = model if isinstance(model, EncoderBackbone) else None
    backbone = getattr(model, "backbone", backbone)
    if not isinstance(backbone, EncoderBackbone):
        raise ValueError(
            "`model` must be an EncoderBackbone or a task with one as its "
            f"`backbone`. Received: model={type(model).__name__}"
        )
    if backbone.num_key_value_heads is not None:
        raise ValueError(
            "Pruning grouped-query attention is not supported. Received: "
            f"num_key_value_heads={backbone.num_key_value_heads}"
        )
    if any(
        block.feed_forward.output_dense.quantization_mode is not None
        or block.self_attention.output_dense.quantization_mode is not None
        for block in backbone.transformer_layers
    ):
        raise ValueError(
            "Prune the float model, then quantize it: this one is quantized."
        )
    if backbone.activation in GATED_ACTIVATIONS:
        raise ValueError(
            "Pruning a gated (SwiGLU, GEGLU) feed-forward is not supported. "
            f"Received: activation={backbone.activation!r}"
        )
    return backbone


def _heads(block):
    attention = block.self_attention
    return attention.num_heads, attention.effective_head_dim


def _per_unit(values, groups):
    """Sums `values` (rows, ...) over `groups` consecutive rows each."""
    values = np.asarray(values, np.float64)
    return values.reshape(groups, -1).sum(axis=1)


def _gate_gradients(model, dataset, loss):
    """E_batches |W * dL/dW| summed per head (W_O rows) and per unit (W_2 rows)."""
    backbone = _backbone(model)
    loss = loss or keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    kernels = []
    for block in backbone.transformer_layers:
        kernels.append(block.self_attention.output_dense.kernel)
        kernels.append(block.feed_forward.output_dense.kernel)

    @tf.function(reduce_retracing=True)
    def gate_derivatives(inputs, labels):
        with tf.GradientTape() as tape:
            value = loss(labels, model(inputs, training=False))
        gradients = tape.gradient(value, kernels)
        # Per row: the derivative of the loss by a gate scaling that row.
        return [tf.reduce_sum(kernel * g, axis=1)
                for kernel, g in zip(kernels, gradients, strict=True)]  # fmt: skip

    heads = [np.zeros(_heads(b)[0]) for b in backbone.transformer_layers]
    units = [np.zeros(b.feed_forward.intermediate_dim)
             for b in backbone.transformer_layers]  # fmt: skip
    batches = 0
    for batch in dataset:
        if not isinstance(batch, tuple | list) or len(batch) < 2:
            raise ValueError(
                "`dataset` must yield (inputs, labels) batches. Received: a "
                f"batch of type {type(batch).__name__}"
            )
        rows = gate_derivatives(batch[0], batch[1])
        for i, block in enumerate(backbone.transformer_layers):
            heads[i] += np.abs(_per_unit(rows[2 * i], _heads(block)[0]))
            units[i] += np.abs(np.asarray(rows[2 * i + 1], np.float64))
        batches += 1
    if not batches:
        raise ValueError("`dataset` is empty: there is no loss to differentiate.")
    return [h / batches for h in heads], [u / batches for u in units]


def _numpy(variable):
    return np.asarray(keras.ops.convert_to_numpy(variable), np.float64)


def head_importance(model, dataset=None, method="gradient", loss=None):
    """The importance of every attention head, one array per layer.

    Args:
        model: an `EncoderClassifier` (or another task with an
            `EncoderBackbone` as `backbone`), or a backbone with
            `method="magnitude"`.
        dataset: `(inputs, labels)` batches (`method="gradient"` only); with
            batches of one example this is exactly Michel et al.'s
            expectation of |dL/dxi_h|, with larger batches it is the mean of
            each batch's |dL/dxi_h| of the batch-mean loss.
        method: "gradient" (Michel et al., 2019) or "magnitude" (L2 norm of
            the head's query, key and value columns and output rows).
        loss: the loss of (labels, outputs); by default sparse categorical
            cross-entropy on logits.

    Returns:
        A list of `num_layers` float64 arrays, each of that layer's heads.
    """
    return _importance(model, dataset, method, loss, 0, _head_magnitudes)


def _head_magnitudes(block):
    """The L2 norm of each head's query, key and value columns and output rows."""
    attention = block.self_attention
    heads, size = _heads(block)
    width = heads * size
    query = _numpy(attention.query_dense.kernel) ** 2  # (d, N H)
    key_value = _numpy(attention.key_value_dense.kernel) ** 2  # (d, 2 N H)
    output = _numpy(attention.output_dense.kernel) ** 2  # (N H, d)
    squares = (
        _per_unit(query.sum(0), heads)
        + _per_unit(key_value[:, :width].sum(0), heads)
        + _per_unit(key_value[:, width:].sum(0), heads)
        + _per_unit(output.sum(1), heads)
    )
    return np.sqrt(squares)


def ffn_importance(model, dataset=None, method="gradient", loss=None):
    """The importance of every feed-forward unit, one array per layer.

    The arguments are those of `head_importance`; "magnitude" is the L2 norm
    of the unit's `W_1` column, `b_1` entry and `W_2` row.

    Returns:
        A list of `num_layers` float64 arrays of that layer's
        `intermediate_dim` units.
    """
    return _importance(model, dataset, method, loss, 1, _unit_magnitudes)


def _unit_magnitudes(block):
    """The L2 norm of each feed-forward unit's `W_1` column, `b_1` entry and
    `W_2` row."""
    ffn = block.feed_forward
    squares = (_numpy(ffn.intermediate_dense.kernel) ** 2).sum(0)
    if ffn.intermediate_dense.use_bias:
        squares += _numpy(ffn.intermediate_dense.bias) ** 2
    squares += (_numpy(ffn.output_dense.kernel) ** 2).sum(1)
    return np.sqrt(squares)


def _importance(model, dataset, method, loss, which, magnitudes):
    """`method`'s scores per layer: the gate gradients' `which` (0: heads,
    1: feed-forward units), or `magnitudes(block)` of every block."""
    check_choice("method", method, METHODS)
    backbone = _backbone(model)
    if method == "gradient":
        return _gate_gradients(model, _require(dataset), loss)[which]
    return [magnitudes(block) for block in backbone.transformer_layers]


def _require(dataset):
    if dataset is None:
        raise ValueError(
            "`method='gradient'` needs a `dataset` of (inputs, labels) batches. "
            "Received: dataset=None"
        )
    return dataset


def least_important(importance, fraction, normalize=True, min_keep=1):
    """The indices to remove: `fraction` of all units, least important first.

    Ranks the units of every layer together (as Michel et al. prune heads
    globally), after dividing each layer's scores by their L2 norm when
    `normalize` (their section 4.1: without it, layers with large gradients
    keep all their heads). Every layer keeps at least `min_keep` units.

    Args:
        importance: a list of per-layer arrays (`head_importance`,
            `ffn_importance`).
        fraction: the share of all units to remove, in [0, 1).
        normalize: divide each layer's scores by their L2 norm first.
        min_keep: units every layer keeps.

    Returns:
        A dict {layer index: sorted list of unit indices to remove}.

    Example:
    >>> least_important([np.array([3.0, 1.0]), np.array([2.0, 5.0])], 0.5,
    ...                 normalize=False)
    {0: [1], 1: [0]}
    """
    if isinstance(fraction, bool) or not 0 <= fraction < 1:
        raise ValueError(
            f"`fraction` must be in [0, 1). Received: fraction={fraction!r}"
        )
    scores = [np.asarray(s, np.float64) for s in importance]
    if normalize:
        scores = [s / (np.linalg.norm(s) or 1.0) for s in scores]
    total = sum(len(s) for s in scores)
    count = int(round(fraction * total))
    ranked = sorted((s, layer, unit) for layer, layer_scores in enumerate(scores)
                    for unit, s in enumerate(layer_scores))  # fmt: skip
    removed = {layer: [] for layer in range(len(scores))}
    for _, layer, unit in ranked:
        if count == 0:
            break
        if len(scores[layer]) - len(removed[layer]) > min_keep:
            removed[layer].append(unit)
            count -= 1
    return {layer: sorted(units) for layer, units in removed.items()}


def _kept(removed, layer, size, name):
    drop = sorted(set(removed.get(layer, ())))
    if any(not 0 <= unit < size for unit in drop) or len(drop) >= size:
        raise ValueError(
            f"`{name}` must name, per layer, some but not all of its {size} "
            f"units by index. Received: {name}[{layer}]={removed.get(layer)}"
        )
    return [unit for unit in range(size) if unit not in drop]


def _check_layers(removed, num_layers, name):
    if not isinstance(removed, dict) or any(
        not isinstance(k, int) or not 0 <= k < num_layers for k in removed
    ):
        raise ValueError(
            f"`{name}` must be a dict {{layer index: [unit indices]}} with "
            f"layers in [0, {num_layers}). Received: {name}={removed!r}"
        )


def _rebuilt(model, backbone, **per_layer):
    """A copy of `model` whose backbone has the given per-layer shape, holding
    `model`'s weights wherever the shapes agree."""
    config = backbone.get_config()
    config.update(per_layer)
    new_backbone = EncoderBackbone.from_config(config)
    if model is backbone:
        new_model = new_backbone
    else:
        task_config = model.get_config()
        task_config.update(backbone=new_backbone, preprocessor=model.preprocessor)
        new_model = type(model)(**task_config)
    for new, old in zip(new_model.weights, model.weights, strict=True):
        if new.path != old.path:
            raise ValueError(f"Weights out of order: {new.path} != {old.path}")
        if tuple(new.shape) == tuple(old.shape):
            new.assign(old)
    return new_model, new_backbone


def prune_heads(model, heads):
    """A smaller copy of `model` without the given attention heads.

    Args:
        model: an `EncoderBackbone` or a task holding one (`EncoderClassifier`).
        heads: {layer index: [head indices to remove]}, e.g. from
            `least_important(head_importance(...), fraction)`; a layer must
            keep at least one head.

    Returns:
        A new model of the same class whose backbone has
        `num_heads_per_layer` heads of the same size, with the remaining
        heads' query, key, value and output weights copied.
    """
    backbone = _backbone(model)
    blocks = backbone.transformer_layers
    _check_layers(heads, len(blocks), "heads")
    kept = [_kept(heads, i, _heads(b)[0], "heads") for i, b in enumerate(blocks)]
    new_model, new_backbone = _rebuilt(
        model, backbone, num_heads_per_layer=[len(k) for k in kept],
        head_dim=_heads(blocks[0])[1],
    )  # fmt: skip
    for keep, old, new in zip(kept, blocks, new_backbone.transformer_layers,
                              strict=True):  # fmt: skip
        heads_before, size = _heads(old)
        columns = np.concatenate([np.arange(h * size, (h + 1) * size) for h in keep])
        width = heads_before * size
        old_attention, new_attention = old.self_attention, new.self_attention
        _copy(old_attention.query_dense, new_attention.query_dense, columns, axis=1)
        _copy(old_attention.key_value_dense, new_attention.key_value_dense,
              np.concatenate([columns, width + columns]), axis=1)  # fmt: skip
        _copy(old_attention.output_dense, new_attention.output_dense, columns, axis=0)
    return new_model


def prune_ffn(model, units):
    """A smaller copy of `model` without the given feed-forward units.

    Args:
        model: an `EncoderBackbone` or a task holding one (`EncoderClassifier`).
        units: {layer index: [unit indices to remove]}, e.g. from
            `least_important(ffn_importance(...), fraction)`.

    Returns:
        A new model of the same class whose backbone has
        `intermediate_dim_per_layer` units, the remaining ones' weights copied.
    """
    backbone = _backbone(model)
    blocks = backbone.transformer_layers
    _check_layers(units, len(blocks), "units")
    kept = [_kept(units, i, b.feed_forward.intermediate_dim, "units")
            for i, b in enumerate(blocks)]  # fmt: skip
    new_model, new_backbone = _rebuilt(
        model, backbone, intermediate_dim_per_layer=[len(k) for k in kept]
    )
    for keep, old, new in zip(kept, blocks, new_backbone.transformer_layers,
                              strict=True):  # fmt: skip
        keep = np.asarray(keep)
        old_ffn, new_ffn = old.feed_forward, new.feed_forward
        _copy(old_ffn.intermediate_dense, new_ffn.intermediate_dense, keep, axis=1)
        _copy(old_ffn.output_dense, new_ffn.output_dense, keep, axis=0)
    return new_model


def _copy(old, new, index, axis):
    """Copies `old`'s kernel (rows or columns `index`) and bias into `new`."""
    kernel = keras.ops.convert_to_numpy(old.kernel)
    new.kernel.assign(np.take(kernel, index, axis=axis))
    if old.use_bias:
        bias = keras.ops.convert_to_numpy(old.bias)
        # The bias follows the output columns; an output projection keeps it.
        new.bias.assign(bias[index] if axis == 1 else bias)

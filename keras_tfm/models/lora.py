"""LoRA fine-tuning: low-rank adapters on a model's projections, the rest frozen.

`keras_tfm.training.enable_lora` is this function; it lives beside the models
because a model re-applies it when it is loaded (see `QuantizationMixin`).
"""

import keras

from keras_tfm.generation.compiled_loops import invalidate_compiled_loops
from keras_tfm.validation import check_positive_float, check_positive_int


def enable_lora(model, rank, lora_alpha=None, layer_names=None):
    """Adds LoRA adapters to a model's projections and freezes every other weight.

        W x  becomes  (W + (lora_alpha / rank) A B) x,   W frozen, A and B trained

    Keras' own `Dense.enable_lora` / `EinsumDense.enable_lora` does the work
    on each adapted layer: it freezes the kernel and adds the float32 factors
    `lora_kernel_a` (A, in x rank, He-uniform) and `lora_kernel_b` (B, rank x
    out, zeros), so the model computes exactly the same function until B
    moves. This function picks the layers and also freezes everything Keras
    leaves trainable (biases, embeddings, normalization scales), so that the
    trainable weights are exactly the adapters: per adapted kernel of shape
    (in, out), `rank * (in + out)` parameters.

    In keras-tfm's blocks the projections are the Dense layers `query`,
    `key_value` (keys and values fused: one adapter for both), `key`/`value`
    (cross-attention), `attention_output`, and the feed-forward
    `intermediate` (gate and up fused with SwiGLU) and `output`; with an
    untied head also `lm_head`. An adapted layer keeps its adapters when the
    model is saved; `layer.kernel` reads the merged W + (alpha/rank) A B. A
    keras-tfm model records the setting in its config, so that
    `keras_tfm.saving.load_model` rebuilds the same adapters, frozen weights
    and optimizer state, and the saved W, A and B come back as they were.
    Generation functions compiled before are dropped (they would ignore the
    adapters) and are compiled again on the next `generate`.

    Args:
        model: a built Keras model or layer.
        rank: the rank of the adapters (e.g. 8).
        lora_alpha: the adapters' scale numerator; by default `rank` (scale
            1). The update is multiplied by `lora_alpha / rank`.
        layer_names: adapt only the Dense / EinsumDense layers with these
            names (e.g. `("query", "key_value")`); by default all of them.

    Returns:
        The adapted layers, in the model's order.

    Raises:
        ValueError: for a bad `rank` or `lora_alpha`, an unbuilt model, when no
            layer matches `layer_names`, or when a layer already has LoRA.

    Example:
    >>> model = keras_tfm.models.CausalLM(keras_tfm.models.DecoderBackbone(
    ...     vocabulary_size=50, num_layers=1, num_heads=2, hidden_dim=16,
    ...     intermediate_dim=32, max_sequence_length=16))
    >>> adapted = keras_tfm.training.enable_lora(model, rank=2)
    >>> sorted(layer.name for layer in adapted)
    ['attention_output', 'intermediate', 'key_value', 'output', 'query']
    >>> sum(int(np.prod(w.shape)) for w in model.trainable_weights)
    416
    """
    check_positive_int("rank", rank)
    if lora_alpha is not None:
        check_positive_float("lora_alpha", lora_alpha)
    if not isinstance(model, keras.layers.Layer):
        raise ValueError(
            f"`model` must be a Keras model or layer. Received: model of type "
            f"{type(model).__name__}"
        )
    if not model.built:
        raise ValueError(
            "`model` must be built before LoRA can be enabled (call it once or "
            f"call `build`). Received: an unbuilt {type(model).__name__}"
        )
    if isinstance(layer_names, str):
        layer_names = (layer_names,)
    candidates = [
        layer
        for layer in model._flatten_layers(include_self=True, recursive=True)
        if isinstance(layer, keras.layers.Dense | keras.layers.EinsumDense)
    ]
    targets = [
        layer
        for layer in candidates
        if layer_names is None or layer.name in set(layer_names)
    ]
    if not targets:
        raise ValueError(
            "No Dense or EinsumDense layer to adapt. Received: layer_names="
            f"{layer_names!r}; the model's Dense layers are named "
            f"{sorted({layer.name for layer in candidates})}"
        )
    already = [layer.name for layer in targets if layer.lora_enabled]
    if already:
        raise ValueError(
            f"LoRA is already enabled on {already[:4]}. Enable it once, on a "
            "freshly loaded model. Received: a model with LoRA layers"
        )
    for layer in targets:
        layer.enable_lora(rank, lora_alpha=lora_alpha)
    adapters = {
        id(w) for layer in targets for w in (layer.lora_kernel_a, layer.lora_kernel_b)
    }
    for weight in model.weights:
        if id(weight) not in adapters:
            weight.trainable = False
    # Recorded for the model's config (`QuantizationMixin`), so that a
    # reloaded model gets the same adapters and trainable weights.
    model._lora_config = {
        "rank": rank,
        "lora_alpha": lora_alpha,
        "layer_names": None if layer_names is None else list(layer_names),
    }
    invalidate_compiled_loops(model)
    return targets

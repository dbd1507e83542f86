"""Re-storing a built layer's weight in another dtype or layout."""

CAST_WEIGHT_DTYPES = ("bfloat16",)
"""Dtypes `cast_weights` stores weight matrices in (activations stay float)."""


def check_cast_dtype(dtype):
    if dtype not in CAST_WEIGHT_DTYPES:
        raise ValueError(
            f"`dtype` must be one of {CAST_WEIGHT_DTYPES}. Received: dtype={dtype!r}"
        )


def restore_variable(layer, attribute, values, name):
    """Replaces `layer.<attribute>` by a non-trainable variable holding `values`
    (their shape and dtype), tracked as the old one was."""
    layer._tracker.unlock()
    try:
        delattr(layer, attribute)
        variable = layer.add_weight(
            name=name,
            shape=values.shape,
            initializer="zeros",
            dtype=str(values.dtype),
            trainable=False,
        )
        variable.assign(values)
        setattr(layer, attribute, variable)
    finally:
        layer._tracker.lock()

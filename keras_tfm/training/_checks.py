"""Argument checks shared by the training utilities."""


def check_ignore_class(ignore_class):
    if ignore_class is not None and (
        isinstance(ignore_class, bool) or not isinstance(ignore_class, int)
    ):
        raise ValueError(
            "`ignore_class` must be an integer or None. "
            f"Received: ignore_class={ignore_class!r}"
        )
    return ignore_class


def real_token_weights(y_true, ignore_class, sample_weight, mask, ops):
    """float32 weights: 0 on ignored/masked tokens, `sample_weight` elsewhere."""
    weights = ops.ones(ops.shape(y_true), "float32")
    if ignore_class is not None:
        real = ops.not_equal(y_true, ops.cast(ignore_class, y_true.dtype))
        weights = weights * ops.cast(real, "float32")
    if mask is not None:
        weights = weights * ops.cast(mask, "float32")
    if sample_weight is not None:
        sample_weight = ops.cast(sample_weight, "float32")
        if len(sample_weight.shape) == len(weights.shape) + 1:
            sample_weight = ops.squeeze(sample_weight, axis=-1)
        weights = weights * ops.broadcast_to(sample_weight, ops.shape(weights))
    return weights

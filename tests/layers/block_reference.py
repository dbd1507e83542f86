"""Float64 references of whole blocks, reading the weights of our layers."""

import numpy as np

from tests.layers import numpy_reference as ref
from tests.layers.test_multi_head_self_attention import reference_weights


def _f64(weight):
    return np.asarray(weight, np.float64)


def norm_fn(norm_layer, normalization, eps):
    if normalization == "rms_norm":
        return lambda x: ref.rms_norm(x, _f64(norm_layer.scale), eps)
    return lambda x: ref.layer_norm(
        x, _f64(norm_layer.gamma), _f64(norm_layer.beta), eps
    )


def feed_forward_fn(ffn, inner_mask=None):
    return lambda x: ref.feed_forward(
        x,
        _f64(ffn.intermediate_dense.kernel),
        _f64(ffn.intermediate_dense.bias),
        _f64(ffn.output_dense.kernel),
        _f64(ffn.output_dense.bias),
        ffn.activation,
        inner_mask,
    )


def attention_fn(attention, context=None, mask=None):
    def apply(x):
        out, _ = ref.attention(
            x,
            x if context is None else context,
            reference_weights(attention),
            attention.num_heads,
            attention.effective_num_key_value_heads,
            attention.effective_head_dim,
            mask=mask,
            rotary_positions=attention.use_rotary,
            query_key_norm=None
            if attention.query_norm is None
            else (
                _f64(attention.query_norm.scale),
                _f64(attention.key_norm.scale),
                attention.layer_norm_epsilon,
            ),
            logit_soft_cap=attention.attention_logit_soft_cap,
        )
        return out

    return apply


def block(layer, x, self_mask, context=None, cross_mask=None):
    """An encoder block (context=None) or a decoder block, in float64."""
    x = np.asarray(x, np.float64)
    norm = lambda n: norm_fn(n, layer.normalization, layer.layer_norm_epsilon)  # noqa: E731
    first = layer.normalize_first
    sandwich = getattr(layer, "sandwich_norm", False)
    x = ref.residual(
        x,
        attention_fn(layer.self_attention, mask=self_mask),
        norm(layer.self_attention_norm),
        first,
        norm(layer.self_attention_post_norm) if sandwich else None,
    )
    if context is not None:
        x = ref.residual(
            x,
            attention_fn(
                layer.cross_attention, np.asarray(context, np.float64), cross_mask
            ),
            norm(layer.cross_attention_norm),
            first,
        )
    return ref.residual(
        x, feed_forward_fn(layer.feed_forward), norm(layer.feed_forward_norm), first,
        norm(layer.feed_forward_post_norm) if sandwich else None,
    )  # fmt: skip

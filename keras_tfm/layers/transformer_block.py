"""The constructor arguments and sublayer factories shared by the blocks."""

import keras

from keras_tfm.layers.feed_forward import FEED_FORWARD_ARGUMENTS, FeedForward
from keras_tfm.layers.hyperparameters import (
    INITIALIZERS,
    config_of,
    store_checked,
    store_initializers,
    values_of,
)
from keras_tfm.layers.multi_head_self_attention import (
    ATTENTION_ARGUMENTS,
    MultiHeadSelfAttention,
)
from keras_tfm.layers.normalization import make_normalization
from keras_tfm.validation import check_heads

# The arguments every block takes, in `get_config` order (besides the
# initializers); each is stored under its own name, checked as in
# `hyperparameters.CHECKS`.
BLOCK_ARGUMENTS = (
    "num_heads",
    "intermediate_dim",
    "head_dim",
    "num_key_value_heads",
    "activation",
    "dropout",
    "normalize_first",
    "normalization",
    "layer_norm_epsilon",
    "use_rotary",
    "rotary_max_wavelength",
    "use_bias",
)
# Options of the blocks that the backbones pass only where they use them
# (`Seq2SeqBackbone` for T5), so the other families' arguments stay as they are.
BLOCK_OPTIONS = (
    "scale_attention",
    "inner_dropout",
    "query_key_norm",
    "attention_logit_soft_cap",
    "sandwich_norm",
)


class TransformerBlock(keras.layers.Layer):
    """Base class of `TransformerEncoderBlock` and `DecoderBlock`.

    Holds the arguments both take, makes their sublayers, and writes the
    residual recipe around every sublayer once (`_pre` and `_post`):

        residual = x
        x = norm(x)            # pre-LN (normalize_first=True) only
        x = sublayer(x)
        x = post_norm(x)       # sandwich_norm=True only (Gemma 2)
        x = dropout(x)
        x = x + residual
        x = norm(x)            # post-LN (the paper) only
    """

    def __init__(
        self,
        num_heads,
        intermediate_dim,
        head_dim=None,
        num_key_value_heads=None,
        activation="relu",
        dropout=0.0,
        normalize_first=False,
        normalization="layer_norm",
        layer_norm_epsilon=1e-5,
        use_rotary=False,
        rotary_max_wavelength=10000,
        use_bias=True,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        scale_attention=True,
        inner_dropout=0.0,
        query_key_norm=False,
        attention_logit_soft_cap=None,
        sandwich_norm=False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        # Each argument above, checked, under its own name.
        store_checked(self, locals(), BLOCK_ARGUMENTS + BLOCK_OPTIONS)
        if self.sandwich_norm and not self.normalize_first:
            raise ValueError(
                "`sandwich_norm=True` (a norm after each sublayer too) needs a "
                "pre-LN block: pass normalize_first=True."
            )
        check_heads(num_heads, head_dim, num_key_value_heads)
        store_initializers(self, locals())
        self.supports_masking = True

    def _make_attention(self, name, use_rotary):
        arguments = values_of(self, ATTENTION_ARGUMENTS + INITIALIZERS)
        arguments["use_rotary"] = use_rotary
        return MultiHeadSelfAttention(**arguments, dtype=self.dtype_policy, name=name)

    def _make_norm(self, name):
        return make_normalization(
            self.normalization, self.layer_norm_epsilon, self.dtype_policy, name
        )

    def _make_feed_forward(self):
        return FeedForward(
            **values_of(self, FEED_FORWARD_ARGUMENTS + INITIALIZERS),
            dtype=self.dtype_policy,
            name="feed_forward",
        )

    def _make_dropout(self, name):
        return keras.layers.Dropout(self.dropout, dtype=self.dtype_policy, name=name)

    def _build_self_attention(self, inputs_shape):
        self.self_attention = self._make_attention("self_attention", self.use_rotary)
        self.self_attention.build(inputs_shape)
        self.self_attention_norm = self._make_norm("self_attention_norm")
        self.self_attention_norm.build(inputs_shape)
        self.self_attention_post_norm = self._make_post_norm(
            "self_attention_post_norm", inputs_shape
        )
        self.self_attention_dropout = self._make_dropout("self_attention_dropout")

    def _build_feed_forward(self, inputs_shape):
        self.feed_forward = self._make_feed_forward()
        self.feed_forward.build(inputs_shape)
        self.feed_forward_norm = self._make_norm("feed_forward_norm")
        self.feed_forward_norm.build(inputs_shape)
        self.feed_forward_post_norm = self._make_post_norm(
            "feed_forward_post_norm", inputs_shape
        )
        self.feed_forward_dropout = self._make_dropout("feed_forward_dropout")

    def _make_post_norm(self, name, inputs_shape):
        """The norm of a sublayer's output with `sandwich_norm`, else None."""
        if not self.sandwich_norm:
            return None
        norm = self._make_norm(name)
        norm.build(inputs_shape)
        return norm

    def _pre(self, x, norm):
        """The sublayer's input: `norm(x)` in a pre-LN block, else `x`."""
        return norm(x) if self.normalize_first else x

    def _post(self, x, residual, norm, dropout, training, post_norm=None):
        """`residual + dropout(post_norm(x))`, then `norm` in a post-LN block."""
        if post_norm is not None:
            x = post_norm(x)
        x = dropout(x, training=training)
        x = x + residual
        return x if self.normalize_first else norm(x)

    def _self_attention_block(self, x, masks, training, cache=None, scores=False):
        """`(x, extra)`: the residual self-attention sublayer.

        `extra` is the updated cache with a `cache`, the attention weights
        with `scores=True`, else None; `masks` are `call`'s mask arguments.
        """
        residual, extra = x, None
        x = self._pre(x, self.self_attention_norm)
        if cache is not None:
            x, extra = self.self_attention(x, cache=cache, training=training, **masks)
        elif scores:
            x, extra = self.self_attention.call_with_scores(
                x, training=training, **masks
            )
        else:
            x = self.self_attention(x, training=training, **masks)
        x = self._post(
            x, residual, self.self_attention_norm, self.self_attention_dropout,
            training, self.self_attention_post_norm,
        )  # fmt: skip
        return x, extra

    def _feed_forward_block(self, x, training):
        residual = x
        x = self.feed_forward(self._pre(x, self.feed_forward_norm), training=training)
        return self._post(
            x, residual, self.feed_forward_norm, self.feed_forward_dropout,
            training, self.feed_forward_post_norm,
        )  # fmt: skip

    def compute_output_shape(self, inputs_shape, *args, **kwargs):
        return inputs_shape

    def get_config(self):
        config = super().get_config()
        config.update(config_of(self, BLOCK_ARGUMENTS + BLOCK_OPTIONS))
        return config

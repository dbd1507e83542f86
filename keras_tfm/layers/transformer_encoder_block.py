import keras

from keras_tfm.kernels.masks import implicit_mask
from keras_tfm.layers.transformer_block import TransformerBlock
from keras_tfm.validation import check_rank


@keras.saving.register_keras_serializable(package="keras_tfm")
class TransformerEncoderBlock(TransformerBlock):
    """One encoder layer: self-attention and a feed-forward network.

    Post-LN, as in the paper (`normalize_first=False`):

        x = Norm(x + Dropout(SelfAttention(x)))
        y = Norm(x + Dropout(FFN(x)))

    Pre-LN (`normalize_first=True`): x = x + Dropout(Sublayer(Norm(x))) for
    each sublayer; a stack of pre-LN blocks wants a final norm after it.

    Args:
        num_heads: number of attention heads.
        intermediate_dim: inner width of the feed-forward network.
        head_dim: size of each head, by default hidden_dim // num_heads.
        num_key_value_heads: fewer key/value heads for grouped-query attention.
        activation: the FFN's "relu" (default), "gelu", "gelu_approximate",
            "silu", "swiglu" or "geglu_approximate".
        dropout: dropout rate of the attention weights and of each sublayer's
            output before the residual addition.
        normalize_first: pre-LN if True, post-LN (the paper) if False.
        normalization: "layer_norm" (default) or "rms_norm".
        layer_norm_epsilon: epsilon of the normalization layers.
        use_rotary: rotary position embedding on queries and keys.
        rotary_max_wavelength: the base of the rotary wavelengths (10000;
            100000 in SmolLM2, 500000 in Llama 3).
        use_bias: whether the dense projections have biases.
        kernel_initializer, bias_initializer: initializers of the projections.
        scale_attention: scale the attention logits by 1 / sqrt(head_dim)
            (default); False for T5.
        inner_dropout: dropout rate inside the feed-forward network, after
            its activation (T5's); 0 (default) adds none.
        query_key_norm: RMS-normalize each attention head's queries and keys
            (`MultiHeadSelfAttention`'s argument; Qwen3's). Default False.
        attention_logit_soft_cap: None, or c: attention logits soft-capped
            to c * tanh(logits / c) (`MultiHeadSelfAttention`'s; Gemma 2).
        sandwich_norm: also normalize each sublayer's output before the
            residual sum (`*_post_norm` sublayers; Gemma 2). Needs
            `normalize_first`. Default False.

    Call arguments:
        inputs: (batch, seq, hidden_dim).
        padding_mask: optional (batch, seq), 1 for real tokens, 0 for padding;
            the implicit Keras mask of `inputs` is used when absent.
        attention_mask: optional (batch, seq, seq).
        return_attention_scores: also return the attention weights.
        training: whether dropout is active.
        attention_bias: optional float (batch or 1, num_heads, seq, seq)
            added to the attention logits (T5's relative position bias).

    Returns:
        `outputs` (batch, seq, hidden_dim); always `(outputs, scores)` with
        `return_attention_scores=True`, scores (batch, num_heads, seq, seq).

    Example:
    >>> block = keras_tfm.layers.TransformerEncoderBlock(
    ...     num_heads=2, intermediate_dim=32)
    >>> block(np.ones((2, 5, 8), "float32")).shape
    TensorShape([2, 5, 8])
    """

    def build(self, inputs_shape):
        self._build_self_attention(inputs_shape)
        self._build_feed_forward(inputs_shape)

    def call(
        self,
        inputs,
        padding_mask=None,
        attention_mask=None,
        return_attention_scores=False,
        training=None,
        attention_bias=None,
    ):
        check_rank("inputs", inputs, 3, "(batch, seq, hidden_dim)")
        if padding_mask is None:
            # Read here: the pre-LN norm would drop the implicit mask.
            padding_mask = implicit_mask(inputs)
        x = inputs

        # Self-attention block.
        masks = {"padding_mask": padding_mask, "attention_mask": attention_mask,
                 "attention_bias": attention_bias}  # fmt: skip
        x, scores = self._self_attention_block(
            x, masks, training, scores=return_attention_scores
        )

        # Feed-forward block.
        x = self._feed_forward_block(x, training)
        return (x, scores) if return_attention_scores else x

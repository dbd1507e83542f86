"""Transformer layers for Keras 3.

Example:
>>> from keras_tfm import layers
>>> block = layers.TransformerEncoderBlock(num_heads=2, intermediate_dim=32)
"""

from keras_tfm.layers.attention_cache import AttentionCache
from keras_tfm.layers.decoder_block import DecoderBlock
from keras_tfm.layers.feed_forward import FeedForward
from keras_tfm.layers.learned_positional_embedding import LearnedPositionalEmbedding
from keras_tfm.layers.multi_head_self_attention import MultiHeadSelfAttention
from keras_tfm.layers.patch_embedding import PatchEmbedding
from keras_tfm.layers.positional_encoding import PositionalEncoding
from keras_tfm.layers.relative_position_bias import RelativePositionBias
from keras_tfm.layers.rotary_embedding import RotaryEmbedding
from keras_tfm.layers.token_embedding import TokenEmbedding
from keras_tfm.layers.transformer_encoder_block import TransformerEncoderBlock
from keras_tfm.quantized_weights import QuantizableDense

__all__ = [
    "AttentionCache",
    "DecoderBlock",
    "FeedForward",
    "LearnedPositionalEmbedding",
    "MultiHeadSelfAttention",
    "PatchEmbedding",
    "PositionalEncoding",
    "QuantizableDense",
    "RelativePositionBias",
    "RotaryEmbedding",
    "TokenEmbedding",
    "TransformerEncoderBlock",
]

import functools
import math

import keras

from keras_tfm.layers.attention_cache import AttentionCache
from keras_tfm.layers.decoder_block import DecoderBlock
from keras_tfm.layers.hyperparameters import as_bool
from keras_tfm.layers.token_embedding import TokenEmbedding
from keras_tfm.models._common import TransformerModel, check_token_ids
from keras_tfm.models.preset_loading import PresetMixin
from keras_tfm.validation import check_positive_float, check_positive_int

RESIDUAL_OUTPUTS = (
    "self_attention/attention_output/kernel",
    "feed_forward/output/kernel",
)
"""The projections that write into the residual stream: GPT-2 scales their
initial weights by `1 / sqrt(2 * num_layers)`."""


def _optional_positive_float(name, value):
    return None if value is None else check_positive_float(name, value)


@keras.saving.register_keras_serializable(package="keras_tfm")
class DecoderBackbone(PresetMixin, TransformerModel):
    """A GPT-style stack of causal decoder blocks: the hidden states, no head.

        h_0 = E[x] + P            (P: learned, sinusoidal, or rotary in attention)
        h_l = DecoderBlock_l(h_{l-1})    causal self-attention, no cross-attention
        h   = Norm(h_L)           (the final norm only when `normalize_first`)

    `CausalLM` puts the language-model head on top. Tokens equal to
    `padding_id` are never attended to.

    Sublayers, by attribute and layer name (a checkpoint converter maps
    weights by them): `token_embedding`, `position_embedding` (absent with
    rotary positions), `embeddings_dropout`, `transformer_layers[i]` named
    `transformer_layer_{i}` (DecoderBlock without cross-attention) and
    `final_norm` (only when `normalize_first`).

    Args:
        vocabulary_size: number of token ids.
        num_layers: number of decoder blocks.
        num_heads: attention heads per block.
        hidden_dim: width of the model.
        intermediate_dim: inner width of the feed-forward networks.
        max_sequence_length: the longest sequence (prompt plus new tokens).
        head_dim: size of each head; by default `hidden_dim // num_heads`.
        num_key_value_heads: fewer key/value heads for grouped-query attention.
        activation: "gelu" (default, exact), "gelu_approximate"
            (tanh, GPT-2's), "relu", "silu" or "swiglu".
        dropout: dropout rate of the embeddings, attention and sublayers.
        normalize_first: pre-LN (default, as GPT-2) or post-LN.
        normalization: "layer_norm" or "rms_norm".
        layer_norm_epsilon: epsilon of the normalization layers.
        position_encoding: "learned" (default), "sinusoidal",
            "sinusoidal_split" (sines and cosines in two halves) or "rotary".
        rotary_max_wavelength: the RoPE base with rotary positions (10000;
            100000 in SmolLM2).
        use_bias: whether the attention and feed-forward projections have
            biases (GPT-2: yes; Llama: no).
        padding_id: the id of padding tokens, or None if no id is padding.
        initializer_range: None (default: Keras' initializers, uniform
            embeddings and Glorot kernels), or GPT-2's initialization with
            this standard deviation (0.02 in GPT-2 and the zoo's GPT
            presets): every embedding and kernel drawn from N(0, r^2), the
            attention and feed-forward output projections from
            N(0, r^2 / (2 * num_layers)). Keras' uniform embeddings (std
            0.029) give a tied head initial logits of std 0.8 after the
            final norm at width 768, which costs about 0.3 nats above the
            uniform distribution's loss before training.
        query_key_norm: RMS-normalize each head's queries and keys before
            the rotary embedding, with `layer_norm_epsilon` (Qwen3's
            `q_norm` and `k_norm`; `MultiHeadSelfAttention`). Default False.
        attention_logit_soft_cap: None (default), or c: every attention
            logit becomes c * tanh(logit / c) (Gemma 2's 50.0).
        sandwich_norm: also normalize each sublayer's output before the
            residual sum (Gemma 2); pre-LN only. Default False.
        scale_embeddings: multiply the token embeddings by sqrt(hidden_dim)
            (Gemma). Default False.
        final_logit_soft_cap: None (default), or c: the language-model
            logits become c * tanh(logits / c) (Gemma 2's 30.0).

    Call arguments:
        token_ids: int (batch, seq).
        training: whether dropout is active.
        return_attention_scores: also return every block's self-attention
            weights.

    Returns:
        The hidden states (batch, seq, hidden_dim); `(hidden, scores)` with
        `return_attention_scores=True`, `scores` a tuple of `num_layers`
        float32 tensors (batch, num_heads, seq, seq).

    Memory in training: `rematerialize_blocks = True` keeps only each
    block's input for the backward pass, which runs the block's forward
    again (`keras.remat`): about one more forward pass of compute for the
    activations of one block instead of all. A training setting, not saved.

    Example:
    >>> backbone = keras_tfm.models.DecoderBackbone(
    ...     vocabulary_size=50, num_layers=1, num_heads=2, hidden_dim=16,
    ...     intermediate_dim=32, max_sequence_length=16)
    >>> backbone(np.array([[5, 6, 7]])).shape
    TensorShape([1, 3, 16])
    """

    own_arguments = {
        "num_layers": check_positive_int,
        "initializer_range": _optional_positive_float,
        "query_key_norm": as_bool,
        "attention_logit_soft_cap": _optional_positive_float,
        "sandwich_norm": as_bool,
        "scale_embeddings": as_bool,
        "final_logit_soft_cap": _optional_positive_float,
    }
    rematerialize_blocks = False

    def __init__(
        self,
        vocabulary_size,
        num_layers,
        num_heads,
        hidden_dim,
        intermediate_dim,
        max_sequence_length,
        head_dim=None,
        num_key_value_heads=None,
        activation="gelu",
        dropout=0.0,
        normalize_first=True,
        normalization="layer_norm",
        layer_norm_epsilon=1e-5,
        position_encoding="learned",
        rotary_max_wavelength=10000,
        use_bias=True,
        padding_id=0,
        initializer_range=None,
        query_key_norm=False,
        attention_logit_soft_cap=None,
        sandwich_norm=False,
        scale_embeddings=False,
        final_logit_soft_cap=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        # Each argument above, checked, under its own name.
        self._store_arguments(locals())

        # All weights exist from construction: saving needs no build config.
        self.token_embedding = TokenEmbedding(
            self.vocabulary_size,
            self.hidden_dim,
            scale_embeddings=self.scale_embeddings,
            logit_soft_cap=self.final_logit_soft_cap,
            dtype=self.dtype_policy,
            name="token_embedding",
        )
        self.token_embedding.build((None, None))
        self.position_embedding = self._make_position_embedding()
        self.embeddings_dropout = self._make_dropout("embeddings_dropout")
        self.transformer_layers = []
        for i in range(self.num_layers):
            block = DecoderBlock(
                **self._block_arguments(
                    query_key_norm=self.query_key_norm,
                    attention_logit_soft_cap=self.attention_logit_soft_cap,
                    sandwich_norm=self.sandwich_norm,
                ),
                name=f"transformer_layer_{i}",
            )
            block.build((None, None, self.hidden_dim))
            self.transformer_layers.append(block)
        self.final_norm = None
        if self.normalize_first:
            self.final_norm = self._make_norm("final_norm")
        if self.initializer_range is not None:
            self._initialize_as_gpt2(self.initializer_range)
        self.built = True

    def _initialize_as_gpt2(self, stddev):
        """Draws every embedding and kernel from N(0, stddev^2), the residual
        outputs' (`RESIDUAL_OUTPUTS`) scaled by `1 / sqrt(2 * num_layers)`."""
        residual = stddev / math.sqrt(2 * self.num_layers)
        for weight in self.weights:
            if weight.path.endswith(RESIDUAL_OUTPUTS):
                scale = residual
            elif weight.path.endswith(("/kernel", "/embeddings")):
                scale = stddev
            else:
                continue
            initializer = keras.initializers.RandomNormal(stddev=scale)
            weight.assign(initializer(weight.shape, dtype=weight.dtype))

    def embed(self, token_ids, start_index=0, training=None):
        """Token plus position embeddings (batch, seq, hidden_dim), dropped out."""
        return self._embed(
            token_ids,
            self.position_embedding,
            self.embeddings_dropout,
            start_index,
            training=training,
        )

    def _final(self, x):
        return x if self.final_norm is None else self.final_norm(x)

    def call(self, token_ids, training=None, return_attention_scores=False):
        check_token_ids("token_ids", token_ids, self.max_sequence_length)
        # No mask at all without a padding id: an all-True one would keep
        # attention off the fused kernels (keras_tfm.kernels.fused_attention).
        padding_mask = (
            None if self.padding_id is None else self.padding_mask_of(token_ids)
        )
        x = self.embed(token_ids, training=training)
        scores = []
        recompute = bool(training) and as_bool(
            "rematerialize_blocks", self.rematerialize_blocks
        )
        for block in self.transformer_layers:
            run_block = functools.partial(
                block,
                padding_mask=padding_mask,
                return_attention_scores=return_attention_scores,
                training=training,
            )
            # keras.remat, not a RematScope: the scope must be open when the
            # layers are built, and TensorFlow's recompute_grad takes no
            # keyword arguments in a graph.
            x = keras.remat(run_block)(x) if recompute else run_block(x)
            if return_attention_scores:
                x, layer_scores = x
                scores.append(layer_scores["self_attention"])
        x = self._final(x)
        return (x, tuple(scores)) if return_attention_scores else x

    def empty_cache(self, batch_size, max_length):
        """One zero cache (batch, 2, max_length, kv_heads, head_dim) per block."""
        return tuple(
            block.empty_cache(batch_size, max_length)
            for block in self.transformer_layers
        )

    def call_with_cache(self, token_ids, caches, cache_update_index, padding_mask=None):
        """One decoding step (or a prefill) with one key/value cache per block.

        Args:
            token_ids: int (batch, seq), the tokens at positions
                `cache_update_index ... cache_update_index + seq - 1`.
            caches: a tuple with one cache per block, see `empty_cache` (the
                generation loop carries them separately: stacking them into
                one tensor at every step would copy every cache per token).
            cache_update_index: int or scalar tensor, or a (batch,) int
                vector: each row's own position (`keras_tfm.serving`).
            padding_mask: optional (batch, max_length), False for the cache
                positions holding padding.

        Returns:
            `(hidden, caches)`: (batch, seq, hidden_dim) after the final norm,
            and the updated caches.
        """
        check_token_ids("token_ids", token_ids, self.max_sequence_length)
        x = self.embed(token_ids, start_index=cache_update_index)
        updated = []
        for block, cache in zip(self.transformer_layers, caches, strict=True):
            x, cache = block(
                x,
                padding_mask=padding_mask,
                cache=AttentionCache(cache, cache_update_index),
            )
            updated.append(cache)
        return self._final(x), tuple(updated)

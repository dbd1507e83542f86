import math

import keras
from keras import ops

from keras_tfm.kernels import kv_cache
from keras_tfm.kernels import masks as mask_utils
from keras_tfm.kernels.attention import dot_product_attention
from keras_tfm.layers.attention_cache import AttentionCache
from keras_tfm.layers.hyperparameters import (
    config_of,
    store_checked,
    store_initializers,
)
from keras_tfm.layers.normalization import make_normalization
from keras_tfm.layers.positions import is_per_row
from keras_tfm.layers.rotary_embedding import RotaryEmbedding
from keras_tfm.quantized_weights import projection
from keras_tfm.validation import (
    check_heads,
    check_last_dim,
    check_mask_shape,
    check_rank,
)

# The constructor arguments besides the initializers, in `get_config` order.
ATTENTION_ARGUMENTS = (
    "num_heads",
    "head_dim",
    "num_key_value_heads",
    "dropout",
    "use_bias",
    "use_rotary",
    "rotary_max_wavelength",
    "scale_attention",
    "query_key_norm",
    "layer_norm_epsilon",
    "attention_logit_soft_cap",
)


@keras.saving.register_keras_serializable(package="keras_tfm")
class MultiHeadSelfAttention(keras.layers.Layer):
    """Multi-head scaled dot-product attention: self, cross, cached.

    For each head h, with X the input and C the context (C = X in
    self-attention):

        Q_h = X W_Q^h,  K_h = C W_K^h,  V_h = C W_V^h
        head_h = softmax(Q_h K_h^T / sqrt(d_k) + B_h + M) V_h
        output = concat(head_1, ..., head_n) W_O

    where M is 0 where the mask allows attention and -inf elsewhere, and B
    an optional additive `attention_bias` (0 without one; T5's relative
    position bias); with `scale_attention=False` the 1 / sqrt(d_k) is left
    out (T5 folds it into the initialisation of W_Q). The
    softmax runs in float32 under every dtype policy; a query that may attend
    to nothing gets zero attention weights (its output is the output bias),
    never NaN. With keys of `CHUNKED_ATTENTION_MIN_LENGTH` (1024) or more,
    no returned scores, no active attention dropout and more than one query,
    `keras_tfm.kernels.attention` runs the exact tiled kernel, so memory grows
    linearly with the length: in self- and cross-attention, and in a prefill
    (a cache written at `cache_update_index=0`, where the queries attend to
    their own keys). When the length is unknown at trace time (a
    `tf.function` with a `None` length, as `model.fit` on bucketed data
    traces) the choice is made when the graph runs.

    Masks (1 means attend, 0 means do not): `padding_mask` (batch, seq) marks
    the real tokens of the keys (of `inputs` in self-attention, of `context`
    in cross-attention, where `context_padding_mask` takes that role; the
    blocks and models call the same mask `encoder_padding_mask`, after their
    `encoder_outputs`, while this layer names it after its `context`); the
    implicit Keras mask of `inputs` / `context` (`Embedding(mask_zero=True)`)
    is used when no padding mask is passed; `use_causal_mask=True` lets query
    t see keys up to t only; `attention_mask` (batch, q, k) is general. All
    given masks are combined with AND.

    Key/value cache: a tensor of shape (batch, 2, max_length, kv_heads,
    head_dim) (see `empty_cache`), passed as one `cache` argument, an
    `AttentionCache(cache, update_index)`. With an `update_index`, the keys
    and values of `inputs` are written into the cache at that index and the
    queries attend to the whole cache, masked so that nothing past the newest
    position is seen; `padding_mask` then covers the cache's positions.
    Without one (`AttentionCache(cache)`), the cache holds precomputed keys
    and values of a context (see `compute_key_value_cache`) and is only read:
    that is how cross-attention avoids recomputing the encoder's keys at
    every step. The attribute `kv_cache_dtype` (not a constructor argument: a
    setting of generation, see `keras_tfm.generation.set_kv_cache_dtype`)
    makes `empty_cache` return an int8 cache with a scale per token and head
    (`keras_tfm.kernels.kv_cache`), dequantized as it is read.

    Args:
        num_heads: number of query heads.
        head_dim: size of each head; by default `hidden_dim // num_heads`,
            which must then divide evenly.
        num_key_value_heads: number of key/value heads for grouped-query
            attention; must divide `num_heads`. Default (None): `num_heads`.
            The values in use after `build` are `effective_head_dim` and
            `effective_num_key_value_heads`; the arguments themselves (and
            `get_config`) keep what was passed.
        dropout: dropout rate on the attention weights.
        use_bias: whether the projections have biases.
        use_rotary: apply rotary position embedding to queries and keys
            (self-attention only).
        rotary_max_wavelength: the base of the rotary wavelengths.
        scale_attention: scale the logits by 1 / sqrt(head_dim) (default);
            False for T5.
        query_key_norm: RMS-normalize each head's query and key over its
            `head_dim` features, with a learned scale shared by the heads,
            before the rotary embedding (Qwen3, Gemma 3, OLMo 2: the
            `query_norm` and `key_norm` sublayers). Default False.
        layer_norm_epsilon: the epsilon of those norms.
        attention_logit_soft_cap: None (default), or c: the scaled logits
            become c * tanh(logits / c) before the masks (Gemma 2's 50.0).
            Such attention runs the plain kernel at every length.
        kernel_initializer, bias_initializer: initializers of the projections.

    Call arguments:
        inputs: (batch, q_len, hidden_dim), the queries' source.
        context: optional (batch, k_len, context_dim), the keys' and values'
            source (cross-attention).
        padding_mask: optional (batch, seq) mask of `inputs`' real tokens.
        context_padding_mask: optional (batch, k_len) mask of `context`.
        attention_mask: optional (batch, q_len, k_len).
        use_causal_mask: whether query t may only see keys <= t.
        attention_bias: optional float (batch or 1, num_heads, q_len, k_len)
            added to the logits (with a cache, k_len is the cache's length).
        cache: optional `AttentionCache`, see above.
        training: whether dropout is active.

    Returns:
        `outputs` (batch, q_len, hidden_dim); with a `cache`, `(outputs,
        cache)`, the cache's storage updated when an `update_index` is given.
        The attention weights come through one method of their own,
        `call_with_scores`.

    Example:
    >>> attention = keras_tfm.layers.MultiHeadSelfAttention(num_heads=2)
    >>> x = np.random.rand(3, 5, 8).astype("float32")
    >>> attention(x, use_causal_mask=True).shape
    TensorShape([3, 5, 8])

    Reference: Vaswani et al., 2017, section 3.2; Ainslie et al., 2023 (GQA).
    """

    def __init__(
        self,
        num_heads,
        head_dim=None,
        num_key_value_heads=None,
        dropout=0.0,
        use_bias=True,
        use_rotary=False,
        rotary_max_wavelength=10000,
        scale_attention=True,
        query_key_norm=False,
        layer_norm_epsilon=1e-6,
        attention_logit_soft_cap=None,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        **kwargs,
    ):
        super().__init__(**kwargs)
        # The constructor's values, kept as given so that `get_config` is the
        # same before and after `build`; the values in effect (which may
        # depend on the input width) are `effective_head_dim` and
        # `effective_num_key_value_heads`.
        store_checked(self, locals(), ATTENTION_ARGUMENTS)
        check_heads(num_heads, head_dim, num_key_value_heads)
        store_initializers(self, locals())
        self.effective_num_key_value_heads = self.num_key_value_heads or num_heads
        self.effective_head_dim = head_dim
        self.supports_masking = True
        self.kv_cache_dtype = None  # see `keras_tfm.kernels.kv_cache`

    def build(self, inputs_shape, context_shape=None):
        hidden_dim = inputs_shape[-1]
        if self.head_dim is None:
            if hidden_dim % self.num_heads:
                raise ValueError(
                    "`hidden_dim` (the last dimension of the input) must be "
                    "divisible by `num_heads`, or pass `head_dim`. Received: "
                    f"hidden_dim={hidden_dim}, num_heads={self.num_heads}"
                )
            self.effective_head_dim = hidden_dim // self.num_heads
        self.hidden_dim = hidden_dim
        kv_source_shape = inputs_shape if context_shape is None else context_shape
        self.context_dim = kv_source_shape[-1]
        # Queries in one projection; keys and values fused into a second one.
        self.query_dense = projection(
            self, self.num_heads * self.effective_head_dim, "query"
        )
        self.query_dense.build(inputs_shape)
        self.key_value_dense = projection(
            self,
            2 * self.effective_num_key_value_heads * self.effective_head_dim,
            "key_value",
        )
        self.key_value_dense.build(kv_source_shape)
        self.output_dense = projection(self, hidden_dim, "attention_output")
        self.output_dense.build((None, None, self.num_heads * self.effective_head_dim))
        self.dropout_layer = keras.layers.Dropout(
            self.dropout, dtype=self.dtype_policy, name="attention_dropout"
        )
        self.rotary_embedding = (
            RotaryEmbedding(self.rotary_max_wavelength, dtype=self.dtype_policy)
            if self.use_rotary
            else None
        )
        self.query_norm = self.key_norm = None
        if self.query_key_norm:
            self.query_norm, self.key_norm = (
                make_normalization(
                    "rms_norm", self.layer_norm_epsilon, self.dtype_policy,
                    name, hidden_dim=self.effective_head_dim,
                )
                for name in ("query_norm", "key_norm")
            )  # fmt: skip

    def empty_cache(self, batch_size, max_length, dtype=None):
        """A zero cache of shape (batch, 2, max_length, kv_heads, head_dim)."""
        shape = (
            batch_size,
            2,
            max_length,
            self.effective_num_key_value_heads,
            self.effective_head_dim,
        )
        return kv_cache.empty_cache(
            shape, dtype or self.compute_dtype, self.kv_cache_dtype
        )

    def compute_key_value_cache(self, context):
        """Keys and values of `context`, (batch, 2, k_len, kv_heads, head_dim).

        Pass the result as `cache` (without `cache_update_index`) to attend to
        `context` without projecting it again.
        """
        check_rank("context", context, 3, "(batch, seq, dim)")
        check_last_dim("context", context, self.context_dim)
        return kv_cache.pair(*self._keys_and_values(context))

    def _keys_and_values(self, source, start_index=0):
        batch, length = ops.shape(source)[0], ops.shape(source)[1]
        key_value = ops.reshape(
            self.key_value_dense(source),
            (
                batch,
                length,
                2,
                self.effective_num_key_value_heads,
                self.effective_head_dim,
            ),
        )
        # Split, not sliced: without XLA the gradient of two slices is two
        # full-size zero-padded tensors and a sum (attention was 2x slower).
        key, value = kv_cache.halves(key_value, axis=2)  # (B, S, K, H) each
        if self.key_norm is not None:
            key = self.key_norm(key)
        if self.rotary_embedding is not None:
            key = self.rotary_embedding(key, start_index=start_index)
        return key, value

    def call(
        self,
        inputs,
        context=None,
        padding_mask=None,
        context_padding_mask=None,
        attention_mask=None,
        use_causal_mask=False,
        cache=None,
        training=None,
        attention_bias=None,
    ):
        outputs, _, cache = self._attend(
            inputs, context, padding_mask, context_padding_mask, attention_mask,
            use_causal_mask, cache, training, return_scores=False,
            attention_bias=attention_bias,
        )  # fmt: skip
        return outputs if cache is None else (outputs, cache)

    def call_with_scores(self, inputs, context=None, **masks_and_training):
        """`(outputs, scores)`: `call`'s outputs and the attention weights.

        The arguments are `call`'s (`padding_mask`, `context_padding_mask`,
        `attention_mask`, `use_causal_mask`, `attention_bias`, `training` by
        keyword), without a
        cache; `scores` are the float32
        weights (batch, num_heads, q_len, k_len), computed by the plain kernel
        (the tiled one never materializes them).

        Example:
        >>> attention = keras_tfm.layers.MultiHeadSelfAttention(num_heads=2)
        >>> x = np.random.rand(3, 5, 8).astype("float32")
        >>> outputs, scores = attention.call_with_scores(x, use_causal_mask=True)
        >>> outputs.shape, scores.shape
        (TensorShape([3, 5, 8]), TensorShape([3, 2, 5, 5]))
        """
        if not self.built:
            self(inputs, context=context)  # builds the layer as `call` would
        inputs = self._compute_dtype_input(inputs)
        if context is not None:
            context = self._compute_dtype_input(context)
        arguments = {"padding_mask": None, "context_padding_mask": None,
                     "attention_mask": None, "use_causal_mask": False,
                     "attention_bias": None, "training": None}  # fmt: skip
        unknown = set(masks_and_training) - set(arguments)
        if unknown:
            raise ValueError(
                "`call_with_scores` takes `call`'s masks and `training` (no "
                f"cache). Received: {sorted(unknown)}"
            )
        arguments.update(masks_and_training)
        outputs, scores, _ = self._attend(
            inputs, context, cache=None, return_scores=True, **arguments
        )
        return outputs, scores

    def _compute_dtype_input(self, x):
        """`x` as a tensor, floats cast to the compute dtype (as `__call__` does)."""
        x = ops.convert_to_tensor(x)  # a tensor is returned as is
        if "float" in str(x.dtype) and x.dtype != self.compute_dtype:
            x = ops.cast(x, self.compute_dtype)
        return x

    def _attend(
        self,
        inputs,
        context,
        padding_mask,
        context_padding_mask,
        attention_mask,
        use_causal_mask,
        cache,
        training,
        return_scores,
        attention_bias=None,
    ):
        """`(outputs, scores, cache)`: the one implementation of both calls.

        `scores` is None unless `return_scores`; `cache` is None without a
        cache, else the updated storage.
        """
        is_cross = self._check_call(inputs, context, cache)
        cache_update_index = None if cache is None else cache.update_index
        cache = None if cache is None else cache.cache
        batch, query_length = ops.shape(inputs)[0], ops.shape(inputs)[1]
        start_index = 0 if cache_update_index is None else cache_update_index
        # A prefill (the whole prompt written at position 0) attends to its
        # own keys only: the cache's later slots are masked anyway.
        prefill = (
            cache is not None
            and isinstance(cache_update_index, int)
            and not isinstance(cache_update_index, bool)
            and cache_update_index == 0
        )

        # Projections.
        query = ops.reshape(
            self.query_dense(inputs),
            (batch, query_length, self.num_heads, self.effective_head_dim),
        )  # (B, T, N, H)
        if self.query_norm is not None:
            query = self.query_norm(query)
        if self.rotary_embedding is not None:
            query = self.rotary_embedding(query, start_index=start_index)
        if cache is not None and cache_update_index is None:
            key, value = kv_cache.read(cache, query.dtype)  # a read-only context
        else:
            key, value = self._keys_and_values(
                inputs if context is None else context, start_index
            )  # (B, S, K, H) each
            if cache is not None:
                cache = kv_cache.write(
                    cache, cache_update_index, key, value, write_at=write_cache
                )
                if not prefill:
                    key, value = kv_cache.read(cache, key.dtype)

        # Masks, then the kernel (`dot_product_attention` picks plain or tiled).
        key_mask, attention_mask, causal_start = self._attention_masks(
            inputs, context,
            # A prefill's masks span the cache (then cut below); read keys
            # are the cache's positions (its first few in a read_window).
            ops.shape(kv_cache.values_of(cache))[2]
            if prefill
            else ops.shape(key)[1],
            padding_mask, context_padding_mask, attention_mask, use_causal_mask,
            cache_update_index, is_cross,
        )  # fmt: skip
        check_mask_shape(
            "attention_bias",
            attention_bias,
            (None, self.num_heads, inputs.shape[1], key.shape[1] if cache is None
             else kv_cache.values_of(cache).shape[2]),
        )  # fmt: skip
        if prefill:
            key_mask = None if key_mask is None else key_mask[:, :query_length]
            if attention_mask is not None:
                attention_mask = attention_mask[:, :, :query_length]
            if attention_bias is not None:
                attention_bias = attention_bias[..., :query_length]
        outputs, scores = dot_product_attention(
            query,
            key,
            value,
            key_mask=key_mask,
            mask=attention_mask,
            causal_start=causal_start,
            scale=1.0 / math.sqrt(self.effective_head_dim)
            if self.scale_attention
            else 1.0,
            dropout_layer=self.dropout_layer if self.dropout > 0 else None,
            training=training,
            return_scores=return_scores,
            bias=attention_bias,
            logit_soft_cap=self.attention_logit_soft_cap,
        )
        outputs = ops.reshape(
            outputs, (batch, query_length, self.num_heads * self.effective_head_dim)
        )
        return self.output_dense(outputs), scores, cache

    def _check_call(self, inputs, context, cache):
        """Checks `call`'s arguments; returns whether it is cross-attention."""
        check_rank("inputs", inputs, 3, "(batch, seq, hidden_dim)")
        check_last_dim("inputs", inputs, self.hidden_dim)
        if cache is not None and not isinstance(cache, AttentionCache):
            raise ValueError(
                "`cache` must be a `keras_tfm.layers.AttentionCache(cache, "
                "update_index)` (update_index=None for a read-only cache). "
                f"Received: cache of type {type(cache).__name__}"
            )
        is_cross = context is not None or (cache is not None and cache.is_read_only)
        if self.use_rotary and is_cross:
            raise ValueError(
                "Rotary embedding applies to self-attention only; this layer was "
                "given a `context` (or a read-only cache). Use use_rotary=False "
                "for cross-attention."
            )
        if context is not None:
            check_rank("context", context, 3, "(batch, seq, dim)")
            check_last_dim("context", context, self.context_dim)
        if cache is not None:
            values = kv_cache.values_of(cache.cache)
            check_rank("cache", values, 5, "(batch, 2, max_length, kv_heads, head_dim)")
            check_mask_shape(
                "cache",
                values,
                (
                    None,
                    2,
                    None,
                    self.effective_num_key_value_heads,
                    self.effective_head_dim,
                ),
            )
        return is_cross

    def _attention_masks(
        self,
        inputs,
        context,
        key_length,
        padding_mask,
        context_padding_mask,
        attention_mask,
        use_causal_mask,
        cache_update_index,
        is_cross,
    ):
        """`(key_mask, attention_mask, causal_start)`, checked, for the kernel.

        key_mask is (batch or 1, k_len), attention_mask (batch, q_len, k_len),
        each None or checked against `key_length` (an int, or a scalar
        tensor when unknown at trace time); causal_start is None or where the
        causal diagonal starts (see `dot_product_attention`).
        """
        query_length = inputs.shape[1]
        static_length = key_length if isinstance(key_length, int) else None
        if is_cross:
            if context_padding_mask is None and context is not None:
                context_padding_mask = mask_utils.implicit_mask(context)
            check_mask_shape(
                "context_padding_mask", context_padding_mask, (None, static_length)
            )
            key_mask = context_padding_mask
        else:
            if padding_mask is None and cache_update_index is None:
                padding_mask = mask_utils.implicit_mask(inputs)
            check_mask_shape("padding_mask", padding_mask, (None, static_length))
            key_mask = padding_mask
        check_mask_shape(
            "attention_mask", attention_mask, (None, query_length, static_length)
        )
        if cache_update_index is None:
            return key_mask, attention_mask, 0 if use_causal_mask else None
        if is_per_row(cache_update_index):
            visible = _visible_per_row(
                cache_update_index, query_length, key_length, use_causal_mask
            )
            return key_mask, mask_utils.merge_masks(attention_mask, visible), None
        if use_causal_mask:
            return key_mask, attention_mask, cache_update_index
        # Never attend to cache slots that are not written yet.
        last = cache_update_index + ops.shape(inputs)[1]
        written = ops.expand_dims(ops.arange(key_length) < last, 0)  # (1, S)
        return mask_utils.merge_masks(key_mask, written), attention_mask, None

    def compute_output_shape(self, inputs_shape, context_shape=None):
        return inputs_shape

    def compute_output_spec(self, inputs, context=None, **kwargs):
        output = keras.KerasTensor(inputs.shape, dtype=self.compute_dtype)
        cache = kwargs.get("cache")
        if cache is None:
            return output
        return output, keras.tree.map_structure(
            lambda c: keras.KerasTensor(c.shape, dtype=c.dtype), cache.cache
        )

    def get_config(self):
        config = super().get_config()
        config.update(config_of(self, ATTENTION_ARGUMENTS))
        return config


def write_cache(cache, update, cache_update_index):
    """`cache` (B, 2, S, K, H) with `update` (B, 2, T, K, H) written at the index.

    A scalar index is one in-place slice update (rather than two updates and
    a stack, which copied the whole cache at every step); a (batch,) vector
    writes each row at its own position, as one scatter.
    """
    if not is_per_row(cache_update_index):
        return ops.slice_update(cache, [0, 0, cache_update_index, 0, 0], update)
    batch, length = ops.shape(update)[0], ops.shape(update)[2]
    start = ops.cast(cache_update_index, "int32")
    shape = (batch, 2, length)
    rows = ops.broadcast_to(
        ops.reshape(ops.arange(batch, dtype="int32"), (-1, 1, 1)), shape
    )
    kinds = ops.broadcast_to(
        ops.reshape(ops.arange(2, dtype="int32"), (1, 2, 1)), shape
    )
    steps = ops.expand_dims(start, 1) + ops.arange(length, dtype="int32")  # (B, T)
    steps = ops.broadcast_to(ops.expand_dims(steps, 1), shape)
    indices = ops.stack([rows, kinds, steps], axis=-1)  # (B, 2, T, 3)
    # As (B * 2 * T, 3) entries: JAX's scatter_update reads a 2-D index list.
    values = ops.reshape(update, (-1, *update.shape[3:]))
    return ops.scatter_update(cache, ops.reshape(indices, (-1, 3)), values)


def _visible_per_row(start, query_length, key_length, use_causal_mask):
    """(B, T, S): which cache positions each row's queries may see.

    Query t of row b sits at position start[b] + t; it sees the keys up to
    itself (causal), or every written key (below start[b] + T) otherwise.
    """
    query_positions = ops.expand_dims(ops.cast(start, "int32"), 1) + ops.arange(
        query_length, dtype="int32"
    )  # (B, T)
    if not use_causal_mask:
        query_positions = ops.broadcast_to(
            ops.max(query_positions, axis=1, keepdims=True), ops.shape(query_positions)
        )
    keys = ops.arange(key_length, dtype="int32")
    return keys[None, None, :] <= query_positions[:, :, None]

"""Exact attention in memory linear in the length: FlashAttention's tiling.

Queries are processed a tile at a time and, for each tile of queries, the
keys and values a tile at a time with a running maximum and sum of the
softmax (Milakov & Gimelshein, 2018; Dao et al., 2022 and 2023). The
backward pass recomputes each tile's weights from the saved log-sum-exp
instead of storing the (q_len, k_len) matrix, so it is linear in memory too.
The loops are `tf.map_fn` / `tf.while_loop`, which run with and without XLA
and for lengths unknown when the graph is traced.
"""

from keras import ops

from keras_tfm._optional import tensorflow as tf
from keras_tfm.kernels.masks import (
    MASKED_LOGIT,
    attention_mask,
    causal_mask,
    merge_masks,
)
from keras_tfm.kernels.plain_attention import grouped_logits
from keras_tfm.validation import check_positive_int

# Keys and queries per tile (benchmarks/attention_tiles.py).
DEFAULT_CHUNK_SIZE = 128
DEFAULT_QUERY_CHUNK_SIZE = 1024


def chunked_dot_product_attention(
    query,
    key,
    value,
    key_mask=None,
    use_causal_mask=False,
    mask=None,
    scale=1.0,
    chunk_size=None,
    query_chunk_size=None,
    causal_start=None,
    plain_below=None,
):
    """softmax(Q K^T * scale, masked) V, tiled, in memory linear in the length.

    It equals `plain_dot_product_attention` to float32 rounding, gradients
    included, and follows its contract: float32 softmax, a query whose keys
    are all masked gets zero weights (zero output). Attention weights are
    never formed, so it returns only the outputs and has no dropout. Any
    lengths work, known or unknown when the graph is traced, with or without
    XLA; with a causal mask the tiles above the diagonal are skipped.

    Args:
        query: (batch, q_len, num_heads, head_dim).
        key, value: (batch, k_len, kv_heads, head_dim), grouped as in
            `plain_dot_product_attention`.
        key_mask: optional boolean (batch, k_len), True for real keys.
        use_causal_mask: query `t` sees keys `<= t + causal_start`.
        mask: optional general boolean (batch or 1, q_len, k_len) mask, read
            tile by tile (it is itself quadratic: prefer the two above).
        scale: the logit scale, usually 1 / sqrt(head_dim).
        chunk_size: keys per tile (default `DEFAULT_CHUNK_SIZE`, read at
            call time); the last tile is padded and masked.
        query_chunk_size: queries per tile (default
            `DEFAULT_QUERY_CHUNK_SIZE`).
        causal_start: the causal diagonal's offset; default `k_len - q_len`
            (the queries are the last positions of the keys). Self-attention
            and `masks.causal_mask` use 0.
        The three masks are combined as `masks.attention_mask` combines them.
        plain_below: optional key length under which the untiled
            computation runs instead (chosen when the graph runs, for
            lengths unknown at trace time); its backward pass also
            recomputes the weights from the log-sum-exp.

    Returns:
        (batch, q_len, num_heads, head_dim) in the query's dtype.

    Example:
    >>> q = k = v = np.random.rand(2, 10, 4, 8).astype("float32")
    >>> out = chunked_dot_product_attention(
    ...     q, k, v, chunk_size=4, query_chunk_size=3)
    >>> plain, _ = plain_dot_product_attention(q, k, v)
    >>> bool(np.allclose(out, plain, atol=1e-6))
    True
    """
    query_tile = check_positive_int(
        "query_chunk_size",
        DEFAULT_QUERY_CHUNK_SIZE if query_chunk_size is None else query_chunk_size,
    )
    if query.shape[1]:  # fewer queries than a tile (a chunk against a long
        # cache): a tile of that many, not padded to the full tile (9x faster
        # for 32 queries against 1,024 keys, the same numbers)
        query_tile = min(query_tile, query.shape[1])
    tiles = _Tiles(
        ops.convert_to_tensor(query),
        ops.convert_to_tensor(key),
        key_mask,
        mask,
        use_causal_mask,
        causal_start,
        query_tile,
        check_positive_int(
            "chunk_size", DEFAULT_CHUNK_SIZE if chunk_size is None else chunk_size
        ),
    )
    value = ops.convert_to_tensor(value)
    if plain_below is None:
        use_plain = False
    else:
        use_plain = tiles.k_len < check_positive_int("plain_below", plain_below)

    @ops.custom_gradient
    def attend(query, key, value):
        out, log_sum_exp = ops.cond(
            use_plain,
            lambda: tiles.plain_forward(query, key, value),
            lambda: tiles.tiled_forward(query, key, value),
        )

        def grad(d_out):
            return ops.cond(
                use_plain,
                lambda: tiles.plain_backward(
                    query, key, value, out, log_sum_exp, d_out
                ),
                lambda: tiles.tiled_backward(
                    query, key, value, out, log_sum_exp, d_out
                ),
            )

        return out, grad

    return attend(tiles.query * ops.cast(scale, tiles.dtype), tiles.key, value)


class _Tiles:
    """The shapes, masks and both computations of one attention call.

    Layouts: the queries' tiles are (Q, B, K, G * tq, H), rows ordered
    (group, position), so that one batched matmul per tile serves every
    query head of a key/value head; the keys' tiles are (C, B, K, tk, H).
    """

    def __init__(
        self, query, key, key_mask, mask, causal, causal_start, query_tile, key_tile
    ):
        self.query, self.key = query, key
        self.dtype = query.dtype
        self.batch, self.q_len = ops.shape(query)[0], ops.shape(query)[1]
        self.k_len = ops.shape(key)[1]
        self.num_heads, self.head_dim = query.shape[2], query.shape[3]
        self.kv_heads = key.shape[2]
        self.groups = self.num_heads // self.kv_heads
        self.causal = causal
        self.causal_start = (
            self.k_len - self.q_len if causal_start is None else causal_start
        )
        self.query_tile, self.key_tile = query_tile, key_tile
        self.num_q_tiles = (self.q_len + query_tile - 1) // query_tile
        self.num_k_tiles = (self.k_len + key_tile - 1) // key_tile
        self.padded_q = self.num_q_tiles * query_tile
        self.padded_k = self.num_k_tiles * key_tile
        self.key_mask = None if key_mask is None else ops.cast(key_mask, "bool")
        self.mask = None if mask is None else ops.cast(mask, "bool")

    # Plain (untiled) computation, for short keys.

    def _plain_mask(self):  # (B or 1, 1, 1, T, S) or None
        keep = attention_mask(
            self.q_len,
            self.k_len,
            self.key_mask,
            self.mask,
            self.causal_start if self.causal else None,
        )
        return None if keep is None else keep[:, None, None]

    def _plain_weights(self, query, key, log_sum_exp=None):
        b, t, k, g = self.batch, self.q_len, self.kv_heads, self.groups
        keep = self._plain_mask()
        logits = grouped_logits(query, key, keep)
        if log_sum_exp is None:
            log_sum_exp = ops.max(logits, -1, keepdims=True)
            weights = ops.exp(logits - log_sum_exp)
            if keep is not None:
                weights = ops.where(keep, weights, 0.0)
            total = ops.sum(weights, -1, keepdims=True)
            attended = total > 0.0
            safe = ops.where(attended, total, 1.0)
            weights = ops.where(attended, weights / safe, 0.0)
            log_sum_exp = log_sum_exp + ops.log(safe)
        else:
            log_sum_exp = ops.transpose(
                ops.reshape(log_sum_exp, (b, t, k, g, 1)), (0, 2, 3, 1, 4)
            )
            weights = ops.exp(logits - log_sum_exp)
            if keep is not None:
                weights = ops.where(keep, weights, 0.0)
        return weights, log_sum_exp

    def plain_forward(self, query, key, value):
        weights, log_sum_exp = self._plain_weights(query, key)
        out = ops.einsum("bkgts,bskh->btkgh", ops.cast(weights, value.dtype), value)
        log_sum_exp = ops.reshape(
            ops.transpose(log_sum_exp, (0, 3, 1, 2, 4)),
            (self.batch, self.q_len, self.num_heads),
        )
        out = ops.reshape(out, (self.batch, self.q_len, self.num_heads, self.head_dim))
        return ops.cast(out, self.dtype), log_sum_exp

    def plain_backward(self, query, key, value, out, log_sum_exp, d_out):
        b, t, k, g, h = (self.batch, self.q_len, self.kv_heads, self.groups,
                         self.head_dim)  # fmt: skip
        weights, _ = self._plain_weights(query, key, log_sum_exp)
        d_out32 = ops.cast(d_out, "float32")
        delta = ops.sum(d_out32 * ops.cast(out, "float32"), -1)  # (B, T, N)
        delta = ops.transpose(ops.reshape(delta, (b, t, k, g, 1)), (0, 2, 3, 1, 4))
        d_out = ops.reshape(ops.cast(d_out, value.dtype), (b, t, k, g, h))
        d_value = ops.einsum("bkgts,btkgh->bskh", ops.cast(weights, value.dtype), d_out)
        d_weights = ops.cast(ops.einsum("btkgh,bskh->bkgts", d_out, value), "float32")
        d_logits = ops.cast(weights * (d_weights - delta), self.dtype)
        d_query = ops.einsum("bkgts,bskh->btkgh", d_logits, key)
        query = ops.reshape(query, (b, t, k, g, h))
        d_key = ops.einsum("bkgts,btkgh->bskh", d_logits, query)
        return ops.reshape(d_query, (b, t, k * g, h)), d_key, d_value

    # Tiled computation.

    def _query_tiles(self, tensor, width):
        """(B, T, N, width) -> (Q, B, K, G * tq, width)."""
        b, k, g, tq = self.batch, self.kv_heads, self.groups, self.query_tile
        tensor = ops.reshape(tensor, (b, self.q_len, k, g, width))
        tensor = ops.pad(
            tensor, [[0, 0], [0, self.padded_q - self.q_len], [0, 0], [0, 0], [0, 0]]
        )
        tensor = ops.reshape(tensor, (b, self.num_q_tiles, tq, k, g, width))
        tensor = ops.transpose(tensor, (1, 0, 3, 4, 2, 5))
        return ops.reshape(tensor, (self.num_q_tiles, b, k, g * tq, width))

    def _from_query_tiles(self, tiles, width):
        """(Q, B, K, G * tq, width) -> (B, T, N, width), undoing `_query_tiles`."""
        b, k, g, tq = self.batch, self.kv_heads, self.groups, self.query_tile
        tiles = ops.reshape(tiles, (self.num_q_tiles, b, k, g, tq, width))
        tiles = ops.transpose(tiles, (1, 0, 4, 2, 3, 5))
        tiles = ops.reshape(tiles, (b, self.padded_q, k * g, width))
        return tiles[:, : self.q_len]

    def _key_tiles(self, tensor):
        """(B, S, K, H) -> (C, B, K, tk, H)."""
        tensor = ops.pad(
            tensor, [[0, 0], [0, self.padded_k - self.k_len], [0, 0], [0, 0]]
        )
        tensor = ops.reshape(
            tensor,
            (self.batch, self.num_k_tiles, self.key_tile, self.kv_heads, -1),
        )
        return ops.transpose(tensor, (1, 0, 3, 2, 4))

    def _from_key_tiles(self, tiles):
        tiles = ops.transpose(tiles, (1, 0, 3, 2, 4))
        tiles = ops.reshape(tiles, (self.batch, self.padded_k, self.kv_heads, -1))
        return tiles[:, : self.k_len]

    def _tile_masks(self):
        """`(keep(i, j), steps(i), visible(i, j))` for query tile i, key tile j.

        keep is a boolean broadcastable to (B, K, G, tq, tk) or None when
        nothing is masked; steps(i) the number of key tiles query tile i
        sees; visible(i, j) whether it sees any key of key tile j.
        """
        tq, tk = self.query_tile, self.key_tile
        valid = None
        padded = not isinstance(self.k_len, int) or self.k_len % tk != 0
        if self.key_mask is not None or padded:
            valid = ops.arange(self.padded_k) < self.k_len
            if self.key_mask is not None:
                key_mask = ops.pad(
                    self.key_mask, [[0, 0], [0, self.padded_k - self.k_len]]
                )
                valid = ops.logical_and(valid[None], key_mask)
            else:
                valid = valid[None]
            valid = ops.reshape(
                valid, (ops.shape(valid)[0], self.num_k_tiles, 1, 1, 1, tk)
            )
            valid = ops.transpose(valid, (1, 0, 2, 3, 4, 5))  # (C, B|1, 1, 1, 1, tk)
        mask = self.mask
        if mask is not None:  # -> (Q, C, B or 1, 1, 1, tq, tk)
            mask = ops.pad(
                mask,
                [
                    [0, 0],
                    [0, self.padded_q - self.q_len],
                    [0, self.padded_k - self.k_len],
                ],
            )
            mask = ops.reshape(
                mask,
                (ops.shape(mask)[0], self.num_q_tiles, tq, self.num_k_tiles, tk),
            )
            mask = ops.transpose(mask, (1, 3, 0, 2, 4))[:, :, :, None, None]

        def keep(i, j):
            causal = None
            if self.causal:
                start = i * tq + self.causal_start - j * tk
                causal = causal_mask(tq, tk, start)  # (1, tq, tk)
            return merge_masks(
                None if valid is None else valid[j],
                causal,
                None if mask is None else mask[i, j],
            )

        def last_row(i):
            return i * tq + tq - 1 + self.causal_start

        def steps(i):
            if not self.causal:
                return self.num_k_tiles
            return ops.clip(last_row(i) // tk + 1, 0, self.num_k_tiles)

        def visible(i, j):
            return last_row(i) >= j * tk

        return keep, steps, visible

    def _logits(self, q, k):  # (B, K, G, tq, tk) float32
        logits = tf.matmul(q, k, transpose_b=True)
        return ops.reshape(ops.cast(logits, "float32"), self._tile_shape())

    def _tile_shape(self, last=None):
        return (self.batch, self.kv_heads, self.groups, self.query_tile,
                self.key_tile if last is None else last)  # fmt: skip

    def _rows_shape(self, last):
        return (self.batch, self.kv_heads, self.groups * self.query_tile, last)

    def tiled_forward(self, query, key, value):
        q_tiles = self._query_tiles(query, self.head_dim)
        k_tiles, v_tiles = self._key_tiles(key), self._key_tiles(value)
        keep_of, steps_of, _ = self._tile_masks()
        h = self.head_dim

        def forward_tile(i):
            q = q_tiles[i]

            def step(j, state):
                running_max, running_sum, accumulator = state
                keep = keep_of(i, j)
                logits = self._logits(q, k_tiles[j])
                if keep is not None:
                    logits = ops.where(keep, logits, MASKED_LOGIT)
                new_max = ops.maximum(running_max, ops.max(logits, -1, keepdims=True))
                weights = ops.exp(logits - new_max)
                if keep is not None:
                    weights = ops.where(keep, weights, 0.0)
                correction = ops.exp(running_max - new_max)
                tile_out = ops.matmul(
                    ops.reshape(
                        ops.cast(weights, v_tiles.dtype),
                        self._rows_shape(self.key_tile),
                    ),
                    v_tiles[j],
                )
                tile_out = ops.reshape(
                    ops.cast(tile_out, "float32"), self._tile_shape(h)
                )
                return (
                    new_max,
                    running_sum * correction + ops.sum(weights, -1, keepdims=True),
                    accumulator * correction + tile_out,
                )

            stats = self._tile_shape(1)
            running_max, running_sum, accumulator = ops.fori_loop(
                0,
                steps_of(i),
                step,
                (
                    ops.full(stats, MASKED_LOGIT, "float32"),
                    ops.zeros(stats, "float32"),
                    ops.zeros(self._tile_shape(h), "float32"),
                ),
            )
            attended = running_sum > 0.0  # False: every key masked.
            safe_sum = ops.where(attended, running_sum, 1.0)
            out = ops.where(attended, accumulator / safe_sum, 0.0)
            return (
                ops.reshape(ops.cast(out, self.dtype), self._rows_shape(h)),
                ops.reshape(running_max + ops.log(safe_sum), self._rows_shape(1)),
            )

        out, log_sum_exp = tf.map_fn(
            forward_tile,
            tf.range(self.num_q_tiles),
            fn_output_signature=(self.dtype, tf.float32),
        )
        return (
            self._from_query_tiles(out, h),
            self._from_query_tiles(log_sum_exp, 1)[..., 0],
        )

    def tiled_backward(self, query, key, value, out, log_sum_exp, d_out):
        h = self.head_dim
        q_tiles = self._query_tiles(query, h)
        k_tiles, v_tiles = self._key_tiles(key), self._key_tiles(value)
        delta = ops.sum(ops.cast(d_out, "float32") * ops.cast(out, "float32"), -1)
        delta = self._query_tiles(delta[..., None], 1)
        delta = ops.reshape(delta, (self.num_q_tiles,) + self._tile_shape(1))
        log_sum_exp = self._query_tiles(log_sum_exp[..., None], 1)
        log_sum_exp = ops.reshape(
            log_sum_exp, (self.num_q_tiles,) + self._tile_shape(1)
        )
        d_out = self._query_tiles(ops.cast(d_out, value.dtype), h)
        keep_of, _, visible = self._tile_masks()
        rows_k = self._rows_shape(self.key_tile)

        def key_tile_grads(j, state):
            d_queries, d_keys, d_values = state

            def query_tile_grads(i):
                q, do = q_tiles[i], d_out[i]

                def compute():
                    keep = keep_of(i, j)
                    weights = ops.exp(self._logits(q, k_tiles[j]) - log_sum_exp[i])
                    if keep is not None:
                        weights = ops.where(keep, weights, 0.0)
                    weights_rows = ops.reshape(ops.cast(weights, do.dtype), rows_k)
                    d_value = tf.matmul(weights_rows, do, transpose_a=True)
                    d_weights = tf.matmul(do, v_tiles[j], transpose_b=True)
                    d_weights = ops.reshape(
                        ops.cast(d_weights, "float32"), self._tile_shape()
                    )
                    d_logits = ops.cast(weights * (d_weights - delta[i]), self.dtype)
                    d_logits = ops.reshape(d_logits, rows_k)
                    d_query = ops.matmul(d_logits, k_tiles[j])
                    d_key = tf.matmul(d_logits, q, transpose_a=True)
                    return tuple(
                        ops.cast(t, "float32") for t in (d_query, d_key, d_value)
                    )

                if not self.causal:
                    return compute()

                def skip():
                    zeros = ops.zeros((self.batch, self.kv_heads, self.key_tile, h))
                    return ops.zeros(ops.shape(q), "float32"), zeros, zeros

                return tf.cond(visible(i, j), compute, skip)

            d_query, d_key, d_value = tf.map_fn(
                query_tile_grads,
                tf.range(self.num_q_tiles),
                fn_output_signature=(tf.float32, tf.float32, tf.float32),
            )
            index = [j, 0, 0, 0, 0]
            d_keys = ops.slice_update(d_keys, index, ops.sum(d_key, 0)[None])
            d_values = ops.slice_update(d_values, index, ops.sum(d_value, 0)[None])
            return d_queries + d_query, d_keys, d_values

        d_queries, d_keys, d_values = ops.fori_loop(
            0,
            self.num_k_tiles,
            key_tile_grads,
            (
                ops.zeros(ops.shape(q_tiles), "float32"),
                ops.zeros(ops.shape(k_tiles), "float32"),
                ops.zeros(ops.shape(v_tiles), "float32"),
            ),
        )
        return (
            ops.cast(self._from_query_tiles(d_queries, h), query.dtype),
            ops.cast(self._from_key_tiles(d_keys), key.dtype),
            ops.cast(self._from_key_tiles(d_values), value.dtype),
        )

"""The computations under the layers: attention, activations, matmuls.

Functions of tensors, without weights or state: the layers (`keras_tfm.layers`)
own the projections, caches and masks and call these. Import them from their
modules (`keras_tfm.kernels.attention`, `.activations`, `.masks`,
`.chunked_feed_forward`, `.weight_only_matmul`); this package imports none of
them itself, so `keras_tfm.validation` can read the activation table without
an import cycle.

Example:
>>> from keras_tfm.kernels.attention import dot_product_attention
>>> q = k = v = np.ones((1, 4, 2, 8), "float32")
>>> dot_product_attention(q, k, v, causal_start=0)[0].shape
TensorShape([1, 4, 2, 8])
"""

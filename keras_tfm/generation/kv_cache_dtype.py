"""The storage of a model's key/value caches during generation: float or int8.

Example:
>>> backbone = keras_tfm.models.DecoderBackbone(
...     vocabulary_size=50, num_layers=2, num_heads=2, hidden_dim=16,
...     intermediate_dim=32, max_sequence_length=16)
>>> llm = keras_tfm.models.CausalLM(backbone)
>>> set_kv_cache_dtype(llm, "int8")
2
>>> type(backbone.empty_cache(1, 16)[0]).__name__
'Int8Cache'
>>> len(llm.generate([5, 6, 7], max_new_tokens=4))
7
"""

from keras_tfm.generation.compiled_loops import invalidate_compiled_loops
from keras_tfm.kernels.kv_cache import check_kv_cache_dtype
from keras_tfm.layers.multi_head_self_attention import MultiHeadSelfAttention


def set_kv_cache_dtype(model, kv_cache_dtype):
    """Makes `model` keep its self-attention key/value caches as `kv_cache_dtype`.

    With "int8", every self-attention cache that `generate` (and
    `ChatSession`, `SpeculativeDecoder`) creates stores int8 numbers with one
    float32 scale per token and head (`keras_tfm.kernels.kv_cache`): 3.76x
    less memory than float32 at head_dim 64, dequantized as attention reads
    it. Cross-attention caches (an encoder's keys, computed once) stay in
    the compute dtype. A setting of the model object, not saved with it;
    the compiled decoding loops are traced again.

    Args:
        model: a model (or layer) with `MultiHeadSelfAttention` layers.
        kv_cache_dtype: "int8", or None for the compute dtype (the default).

    Returns:
        How many attention layers were set.
    """
    check_kv_cache_dtype(kv_cache_dtype)
    count = 0
    for layer in model._flatten_layers(include_self=True, recursive=True):
        if isinstance(layer, MultiHeadSelfAttention):
            layer.kv_cache_dtype = kv_cache_dtype
            count += 1
    if not count:
        raise ValueError(
            "`model` has no attention layer whose cache could be stored as "
            f"{kv_cache_dtype!r}. Received: model={type(model).__name__}"
        )
    invalidate_compiled_loops(model)
    return count

"""Llama-architecture GGUF files (llama.cpp) -> `keras_tfm.models.CausalLM`.

The metadata gives the sizes (`llama.*` keys) and the tokenizer
(`tokenizer.ggml.*`, `tokenizer.chat_template`); the tensors are read and
dequantised to float32 by `gguf` (see gguf_reader.py).

llama.cpp's converter reorders the rows of each query and key head: ggml's
Llama RoPE rotates adjacent pairs (2i, 2i + 1), HuggingFace's and ours rotate
the half-split pairs (i, i + head_dim / 2). Within a head of size d, GGUF row
2i + j (j = 0, 1) is HuggingFace row i + j * d / 2; `unpermute_rows` puts
them back (transformers does the same when it loads a GGUF file, and
tests/convert checks the result against its weights).
"""

import numpy as np

from keras_tfm.convert.gguf_reader import dequantize, metadata, open_gguf, tensor_table
from keras_tfm.convert.gguf_tokenizer import PRE_TOKENIZERS, GGUFBytePairTokenizer
from keras_tfm.models.causal_lm import CausalLM

CONTROL_TOKEN = 3  # llama.cpp's LLAMA_TOKEN_TYPE_CONTROL in tokenizer.ggml.token_type


def unpermute_rows(weight, num_heads):
    """Undoes llama.cpp's q/k row order: (heads * d, in) -> same shape."""
    rows = weight.shape[0]
    if rows % (2 * num_heads):
        raise ValueError(
            f"A q/k weight needs a multiple of 2 * num_heads={2 * num_heads} "
            f"rows. Received: shape={weight.shape}"
        )
    half = rows // num_heads // 2
    return weight.reshape(num_heads, half, 2, -1).swapaxes(1, 2).reshape(weight.shape)


def llama_config(reader):
    """`CausalLM` arguments from a GGUF file's `llama.*` metadata."""
    architecture = metadata(reader, "general.architecture")
    if architecture != "llama":
        raise ValueError(
            "Only the Llama architecture is supported. Received: "
            f"general.architecture={architecture!r}"
        )
    num_heads = metadata(reader, "llama.attention.head_count")
    hidden_dim = metadata(reader, "llama.embedding_length")
    head_dim = hidden_dim // num_heads
    rope_dims = metadata(reader, "llama.rope.dimension_count", head_dim, False)
    if rope_dims != head_dim:
        raise ValueError(
            "Only RoPE over whole heads is supported. Received: "
            f"llama.rope.dimension_count={rope_dims}, head size {head_dim}"
        )
    vocabulary = metadata(reader, "tokenizer.ggml.tokens")
    names = tensor_table(reader)
    return dict(
        vocabulary_size=len(vocabulary),
        num_layers=metadata(reader, "llama.block_count"),
        num_heads=num_heads,
        hidden_dim=hidden_dim,
        intermediate_dim=metadata(reader, "llama.feed_forward_length"),
        max_sequence_length=metadata(reader, "llama.context_length"),
        num_key_value_heads=metadata(reader, "llama.attention.head_count_kv"),
        activation="swiglu",
        normalize_first=True,
        normalization="rms_norm",
        layer_norm_epsilon=float(
            metadata(reader, "llama.attention.layer_norm_rms_epsilon")
        ),
        position_encoding="rotary",
        rotary_max_wavelength=float(
            metadata(reader, "llama.rope.freq_base", 10000.0, False)
        ),
        use_bias=False,
        # Without an `output.weight` tensor the head is the embedding.
        tie_word_embeddings="output.weight" not in names,
        padding_id=None,
    )


def llama_tokenizer(reader):
    """A `GGUFBytePairTokenizer` from the `tokenizer.*` metadata."""
    model = metadata(reader, "tokenizer.ggml.model")
    if model != "gpt2":
        raise ValueError(
            "Only GPT-2-style byte-level BPE tokenizers are supported. "
            f"Received: tokenizer.ggml.model={model!r}"
        )
    pre = metadata(reader, "tokenizer.ggml.pre", "gpt2", False)
    if pre not in PRE_TOKENIZERS:
        raise ValueError(
            f"Only the pre-tokenizers {list(PRE_TOKENIZERS)} are supported. "
            f"Received: tokenizer.ggml.pre={pre!r}"
        )
    tokens = metadata(reader, "tokenizer.ggml.tokens")
    types = metadata(reader, "tokenizer.ggml.token_type", [1] * len(tokens), False)

    def token(key):
        index = metadata(reader, key, None, False)
        return None if index is None else tokens[index]

    return GGUFBytePairTokenizer(
        vocabulary={t: i for i, t in enumerate(tokens)},
        merges=metadata(reader, "tokenizer.ggml.merges"),
        pre_tokenizer=pre,
        unsplittable_tokens=[
            t for t, k in zip(tokens, types, strict=True) if k == CONTROL_TOKEN
        ],
        bos_token=token("tokenizer.ggml.bos_token_id"),
        eos_token=token("tokenizer.ggml.eos_token_id"),
        pad_token=token("tokenizer.ggml.padding_token_id"),
        chat_template=metadata(reader, "tokenizer.chat_template", None, False),
    )


def llama_weights(reader, config):
    """Our weight path -> float32 array, from the GGUF tensors.

    GGUF matrices are (out, in) as in PyTorch; Keras kernels are (in, out).
    """
    tensors = tensor_table(reader)
    hidden, inner = config["hidden_dim"], config["intermediate_dim"]
    heads, kv_heads = config["num_heads"], config["num_key_value_heads"]
    head_dim = hidden // heads

    def get(name, shape):
        if name not in tensors:
            raise ValueError(
                f"The GGUF file has no tensor {name!r}, which a Llama model "
                f"with this metadata needs. Received tensors such as "
                f"{sorted(tensors)[:4]}"
            )
        return dequantize(tensors[name], shape)

    vocabulary = config["vocabulary_size"]
    weights = {
        "token_embedding/embeddings": get("token_embd.weight", (vocabulary, hidden)),
        "final_norm/scale": get("output_norm.weight", (hidden,)),
    }
    if not config["tie_word_embeddings"]:
        weights["lm_head/kernel"] = get("output.weight", (vocabulary, hidden)).T
    for i in range(config["num_layers"]):
        b, ours = f"blk.{i}.", f"transformer_layer_{i}/"
        query = unpermute_rows(get(b + "attn_q.weight", (hidden, hidden)), heads)
        key = unpermute_rows(
            get(b + "attn_k.weight", (kv_heads * head_dim, hidden)), kv_heads
        )
        value = get(b + "attn_v.weight", (kv_heads * head_dim, hidden))
        gate = get(b + "ffn_gate.weight", (inner, hidden))
        up = get(b + "ffn_up.weight", (inner, hidden))
        weights.update(
            {
                ours + "self_attention/query/kernel": query.T,
                # Our fused projection: all key heads, then all value heads.
                ours + "self_attention/key_value/kernel": np.concatenate(
                    [key.T, value.T], axis=1
                ),
                ours + "self_attention/attention_output/kernel": get(
                    b + "attn_output.weight", (hidden, hidden)
                ).T,
                ours + "self_attention_norm/scale": get(
                    b + "attn_norm.weight", (hidden,)
                ),
                # SwiGLU's fused input projection: gate, then up.
                ours + "feed_forward/intermediate/kernel": np.concatenate(
                    [gate.T, up.T], axis=1
                ),
                ours + "feed_forward/output/kernel": get(
                    b + "ffn_down.weight", (hidden, inner)
                ).T,
                ours + "feed_forward_norm/scale": get(b + "ffn_norm.weight", (hidden,)),
            }
        )
    return weights


def load_gguf_llama(path, max_sequence_length=None):
    """Loads a Llama-architecture GGUF file as a `CausalLM` with its tokenizer.

    The weights are dequantised to float32 (supported types:
    `gguf_reader.SUPPORTED_TYPES`: F32, F16, BF16, Q4_0/1, Q5_0/1, Q8_0 and
    the K-quants); the query/key rows are put back in the half-split order
    of our rotary embedding. The model is pre-norm with RMSNorm, SwiGLU,
    grouped-query attention, RoPE with the file's base and no biases; the
    head is the embedding unless the file has an `output.weight`. The
    tokenizer (a `GGUFBytePairTokenizer` with the file's vocabulary, merges,
    pre-tokenizer, special tokens and ChatML chat template) is attached, so
    `generate` takes strings.

    Args:
        path: a .gguf file.
        max_sequence_length: the longest sequence the model accepts; defaults
            to the file's `llama.context_length`.

    Returns:
        A float32 `keras_tfm.models.CausalLM`.

    Example:
    >>> model = load_gguf_llama(keras_tfm.convert.smollm2_gguf_path())
    >>> model.num_layers, model.hidden_dim, model.num_key_value_heads
    (30, 576, 3)
    >>> prompt = model.tokenizer.apply_chat_template(
    ...     "What is the capital of France?")
    >>> ids = model.tokenizer(prompt)
    >>> next_id = int(np.argmax(model(ids[None])[0, -1]))
    >>> model.tokenizer.id_to_token(next_id)
    'The'
    """
    reader = open_gguf(path)
    config = llama_config(reader)
    if max_sequence_length is not None:
        config["max_sequence_length"] = max_sequence_length
    tokenizer = llama_tokenizer(reader)
    if tokenizer.vocabulary_size() != config["vocabulary_size"]:
        raise ValueError(
            "The tokenizer and the model disagree on the vocabulary size. "
            f"Received: {tokenizer.vocabulary_size()} tokens and "
            f"llama.vocab_size={config['vocabulary_size']}"
        )
    weights = llama_weights(reader, config)
    model = CausalLM(**config, tokenizer=tokenizer, dtype="float32")
    ours = {w.path: w for w in model.weights}
    if set(ours) != set(weights):
        raise ValueError(
            "The CausalLM's weights do not match the Llama mapping. Unmapped: "
            f"{sorted(set(ours) - set(weights))[:4]}; unknown: "
            f"{sorted(set(weights) - set(ours))[:4]}"
        )
    for name, value in weights.items():
        if tuple(ours[name].shape) != value.shape:
            raise ValueError(
                f"Weight {name} has shape {tuple(ours[name].shape)} but the "
                f"GGUF file's has {value.shape}"
            )
        ours[name].assign(value)
    return model

"""GGUF files (llama.cpp's format) of the Llama family -> `CausalLM`.

`general.architecture` "llama", "qwen2", "qwen3" or "phi3"
(`ARCHITECTURES`). A GGUF file gives the sizes in its `{architecture}.*`
metadata and the tokenizer in `tokenizer.ggml.*`; its tensors, dequantised
to float32 by gguf_reader.py (or kept as int8 blocks, gguf_blocks.py), are
renamed to HuggingFace's names with their q/k rows put back in
HuggingFace's order (gguf_names.py), Phi-3's fused ones split as
`load_hf_llama` splits them, and go through the same
`llama.convert_weights` as a HuggingFace checkpoint's. A conversion is
kept in the cache folder (`converted_cache.py`) and read back by the next
load of the same file.
"""

import numpy as np

from keras_tfm.convert import converted_cache, gguf_blocks
from keras_tfm.convert.gguf_names import (
    GGUF_PRE_TOKENIZERS,
    gguf_name_from_hf,
    hf_name_from_gguf,
    unpermute_rows,
)
from keras_tfm.convert.gguf_reader import (
    check_tensor,
    dequantize,
    metadata,
    open_gguf,
    tensor_table,
)
from keras_tfm.convert.gguf_sentencepiece import convert_gguf_sentencepiece
from keras_tfm.convert.llama import (
    QUERY_KEY_NORMS,
    _add_zero_biases,
    _zero_biases,
    check_window,
    convert_backbone_config,
    convert_weights,
    llama_hf_shapes,
    phi3_hf_shapes,
    split_phi3_tensors,
)
from keras_tfm.convert.weights import built_with_weights
from keras_tfm.models.causal_lm import CausalLM
from keras_tfm.quantized_weights import INT8_BLOCKS
from keras_tfm.quantized_weights import int8_blocks as quantize_to_int8_blocks
from keras_tfm.tokenizers.byte_level_bpe_tokenizer import ByteLevelBPETokenizer

CONTROL_TOKEN = 3  # llama.cpp's LLAMA_TOKEN_TYPE_CONTROL in tokenizer.ggml.token_type


# `general.architecture` values this loader reads: each is the HuggingFace
# `model_type` of the same name, converted by `llama.convert_backbone_config`.
ARCHITECTURES = ("llama", "qwen2", "qwen3", "phi3")
# Phi-3's LongRoPE factors (Phi-3-128k, Phi-3.5): RoPE scaling written as
# tensors, with no `rope.scaling.type`. (Llama 3.1's `rope_freqs.weight` is
# refused as a tensor with no HuggingFace name.)
ROPE_SCALING_TENSORS = ("rope_factors_long.weight", "rope_factors_short.weight")


def _shortest(value):
    """A float32 metadata value as the shortest decimal that rounds to it
    (1e-06, not 9.999999974752427e-07: the config.json value it came from)."""
    return float(str(np.float32(value)))


def gguf_hf_config(reader):
    """The config.json a GGUF file's `{architecture}.*` metadata stands for.

    The metadata is checked for what only GGUF can say (the architecture,
    partial RoPE, RoPE scaling, also as factor tensors) first, before any
    tensor is read; transformers reads a GGUF file's metadata into the same
    keys. A Phi-3 file's `attention.sliding_window` (0: none) becomes
    `sliding_window`, which caps the length as in `load_hf_llama`.
    """
    architecture = metadata(reader, "general.architecture")
    if architecture not in ARCHITECTURES:
        raise ValueError(
            f"Only the GGUF architectures {list(ARCHITECTURES)} are supported. "
            f"Received: general.architecture={architecture!r}"
        )

    def key(name, default=None):  # required unless it has a default
        return metadata(reader, f"{architecture}.{name}", default, default is None)

    num_heads = key("attention.head_count")
    hidden_dim = key("embedding_length")
    head_dim = key("attention.key_length", 0) or hidden_dim // num_heads
    rope_dims = key("rope.dimension_count", head_dim)
    if rope_dims != head_dim:
        raise ValueError(
            "Only RoPE over whole heads is supported. Received: "
            f"{architecture}.rope.dimension_count={rope_dims}, head size {head_dim}"
        )
    scaling = key("rope.scaling.type", "none")
    if scaling != "none":
        raise ValueError(
            "RoPE scaling is not supported. Received: "
            f"{architecture}.rope.scaling.type={scaling!r}"
        )
    table = tensor_table(reader)
    for name in ROPE_SCALING_TENSORS:
        if name in table:
            raise ValueError(
                "RoPE scaling is not supported (Phi-3's LongRoPE factors). "
                f"Received: a tensor {name!r} in a {architecture!r} file"
            )
    extra = {}
    if architecture == "phi3":
        extra["sliding_window"] = key("attention.sliding_window", 0) or None
    return {
        "model_type": architecture,
        "vocab_size": len(metadata(reader, "tokenizer.ggml.tokens")),
        "num_hidden_layers": key("block_count"),
        "num_attention_heads": num_heads,
        "hidden_size": hidden_dim,
        "intermediate_size": key("feed_forward_length"),
        "max_position_embeddings": key("context_length"),
        "num_key_value_heads": key("attention.head_count_kv"),
        "head_dim": head_dim,
        "rms_norm_eps": _shortest(key("attention.layer_norm_rms_epsilon")),
        "rope_theta": _shortest(key("rope.freq_base", 10000.0)),
        # Without an `output.weight` tensor the head is the embedding.
        "tie_word_embeddings": "output.weight" not in table,
        **extra,
    }


def convert_gguf_backbone_config(reader):
    """`CausalLM` arguments from a GGUF file's metadata (`gguf_hf_config`,
    converted by `convert_backbone_config` as a HuggingFace config is)."""
    return convert_backbone_config(gguf_hf_config(reader), reader.data.filename)


def convert_gguf_tokenizer(reader):
    """A `ByteLevelBPETokenizer` from the `tokenizer.*` metadata; for a
    SentencePiece vocabulary ("llama"), a `SentencePieceBPETokenizer`
    (`gguf_sentencepiece.py`)."""
    model = metadata(reader, "tokenizer.ggml.model")
    if model == "llama":
        return convert_gguf_sentencepiece(reader)
    if model != "gpt2":
        raise ValueError(
            "Only byte-level BPE ('gpt2') and SentencePiece ('llama') "
            f"vocabularies are supported. Received: tokenizer.ggml.model={model!r}"
        )
    pre = metadata(reader, "tokenizer.ggml.pre", "gpt2", False)
    if pre not in GGUF_PRE_TOKENIZERS:
        raise ValueError(
            f"Only the pre-tokenizers {sorted(GGUF_PRE_TOKENIZERS)} are "
            f"supported. Received: tokenizer.ggml.pre={pre!r}"
        )
    tokens = metadata(reader, "tokenizer.ggml.tokens")
    types = metadata(reader, "tokenizer.ggml.token_type", [1] * len(tokens), False)

    def token(key):
        index = metadata(reader, key, None, False)
        return None if index is None else tokens[index]

    return ByteLevelBPETokenizer(
        vocabulary={t: i for i, t in enumerate(tokens)},
        merges=metadata(reader, "tokenizer.ggml.merges"),
        **GGUF_PRE_TOKENIZERS[pre],
        unsplittable_tokens=[
            t for t, k in zip(tokens, types, strict=True) if k == CONTROL_TOKEN
        ],
        bos_token=token("tokenizer.ggml.bos_token_id"),
        eos_token=token("tokenizer.ggml.eos_token_id"),
        pad_token=token("tokenizer.ggml.padding_token_id"),
        chat_template=metadata(reader, "tokenizer.chat_template", None, False),
    )


def gguf_tensors(reader, config, read=dequantize):
    """The GGUF tensors under HuggingFace Llama names, as float32 arrays.

    Each tensor is renamed (`gguf_names.hf_name_from_gguf`; a tensor with no
    HuggingFace name is refused), dequantised with the shape `config` needs
    and, for q and k of a "llama" file, put back in HuggingFace's row order
    (llama.cpp's converter reorders them for ggml's Llama RoPE, not Qwen's
    or Phi-3's, whose NEOX RoPE pairs rows as HuggingFace does). A Phi-3
    file's fused `attn_qkv` and `ffn_up` (gate and up rows) are read whole
    and split (`llama.split_phi3_tensors`). The biases a Qwen2 file
    has none of (output, feed-forward) are zeros, as `load_hf_llama` makes
    them. GGUF matrices are (out, in), as in PyTorch. `read(tensor, shape)`
    may return a tuple of arrays of `shape`'s rows instead (`_read_blocks`);
    each is reordered.
    """
    architecture = metadata(reader, "general.architecture")
    zero_biases, who = _zero_biases({"model_type": architecture})
    zero_names = set(_add_zero_biases({}, config, zero_biases, who))
    table = tensor_table(reader)
    names = {hf_name_from_gguf(name, architecture): name for name in table}
    shapes = phi3_hf_shapes(config) if architecture == "phi3" else None
    tensors = {}
    for hf_name, shape in (shapes or llama_hf_shapes(config)).items():
        if hf_name in zero_names:
            continue
        if hf_name not in names:
            raise ValueError(
                f"The GGUF file has no tensor "
                f"{gguf_name_from_hf(hf_name, architecture)!r}, which "
                f"a {architecture!r} model with this metadata needs. Received "
                f"tensors such as {sorted(table)[:4]}"
            )
        value = read(table[names.pop(hf_name)], shape)
        heads = None
        if architecture != "llama":
            pass
        elif hf_name.endswith("q_proj.weight"):
            heads = config["num_heads"]
        elif hf_name.endswith("k_proj.weight"):
            heads = config["num_key_value_heads"]
        if heads is not None and isinstance(value, tuple):
            value = tuple(unpermute_rows(part, heads) for part in value)
        elif heads is not None:
            value = unpermute_rows(value, heads)
        tensors[hf_name] = value
    if names:  # e.g. layers beyond {architecture}.block_count.
        raise ValueError(
            f"The GGUF file has tensors this {architecture!r} model has no place "
            f"for: {sorted(names.values())[:4]}"
        )
    if architecture == "phi3":
        tensors = split_phi3_tensors(tensors, config, "the GGUF file")
    return _add_zero_biases(tensors, config, zero_biases, who)


WEIGHT_MODES = ("float32", INT8_BLOCKS)
"""How `load_gguf_llama` holds the weight matrices."""


def _read_blocks(tensor, shape):
    """A matrix as int8 blocks (`gguf_blocks.int8_blocks`; other types are
    dequantised and quantised to symmetric blocks); a vector as float32."""
    if len(shape) == 1:
        return dequantize(tensor, shape)
    check_tensor(tensor, shape)
    blocks = gguf_blocks.int8_blocks(tensor, shape)
    if blocks is None:
        blocks = quantize_to_int8_blocks(dequantize(tensor, shape))
    return blocks


def _check_block_config(config):
    if config["use_bias"]:
        raise ValueError(
            "int8 blocks are supported for models without biases (not Qwen2). "
            f"Received: use_bias={config['use_bias']}"
        )


def block_weights(tensors, config):
    """Our weight paths -> arrays for a model holding int8 blocks.

    Args:
        tensors: HuggingFace name -> (values, scale, offset) for matrices,
            (out, ...) each, and float32 arrays for the norms
            (`gguf_tensors(reader, config, read=_read_blocks)`).
        config: the `CausalLM` arguments (no biases).

    Returns:
        `{layer path: (values, scale, offset)}` for `hold_blocks`, and our
        float weight paths -> arrays (the norms).
    """
    _check_block_config(config)

    def rows(*names):  # fused projections: the parts' output rows stacked
        return tuple(np.concatenate([tensors[n][i] for n in names]) for i in range(3))

    blocks = {"token_embedding": tensors["model.embed_tokens.weight"]}
    floats = {"final_norm/scale": tensors["model.norm.weight"]}
    if not config["tie_word_embeddings"]:
        blocks["lm_head"] = tensors["lm_head.weight"]
    for i in range(config["num_layers"]):
        p, ours = f"model.layers.{i}.", f"transformer_layer_{i}/"
        attention, mlp = p + "self_attn.", p + "mlp."
        blocks[ours + "self_attention/query"] = rows(attention + "q_proj.weight")
        blocks[ours + "self_attention/key_value"] = rows(
            attention + "k_proj.weight", attention + "v_proj.weight"
        )
        blocks[ours + "self_attention/attention_output"] = rows(
            attention + "o_proj.weight"
        )
        blocks[ours + "feed_forward/intermediate"] = rows(
            mlp + "gate_proj.weight", mlp + "up_proj.weight"
        )
        blocks[ours + "feed_forward/output"] = rows(mlp + "down_proj.weight")
        floats[ours + "self_attention_norm/scale"] = tensors[
            p + "input_layernorm.weight"
        ]
        floats[ours + "feed_forward_norm/scale"] = tensors[
            p + "post_attention_layernorm.weight"
        ]
        if config["query_key_norm"]:
            for hf, norm in QUERY_KEY_NORMS:
                floats[f"{ours}self_attention/{norm}/scale"] = tensors[attention + hf]
    return blocks, floats


BLOCK_PARTS = ("values", "scale", "offset")


def load_gguf_llama(path, max_sequence_length=None, weights="float32"):
    """Loads a GGUF file of the Llama family as a `CausalLM` with its tokenizer.

    `general.architecture` "llama", "qwen2" (q/k/v biases), "qwen3"
    (per-head query/key norms) or "phi3" (fused `attn_qkv` and gate-up
    `ffn_up`, split into Llama's projections; Phi-3's files have a
    SentencePiece vocabulary, Phi-4's a byte-level BPE); any other is
    refused by name before a weight is read, as are RoPE over part of each
    head (`rope.dimension_count` less than the head size: Phi-4-mini) and
    LongRoPE (`rope_factors_long.weight`: Phi-3-128k, Phi-3.5). A Phi-3
    `attention.sliding_window` caps the length.

    The conversion (config, tokenizer, float32 weights) is kept in the
    cache folder, keyed by the file's SHA-256, `max_sequence_length` and the
    versions (`keras_tfm.convert.converted_cache`): a second load of the same
    file reads it back instead of parsing the GGUF file again.

    The weights are dequantised to float32 (supported types:
    `gguf_reader.SUPPORTED_TYPES`: F32, F16, BF16, Q4_0/1, Q5_0/1, Q8_0 and
    the K-quants); a "llama" file's query/key rows are put back in the
    half-split order of our rotary embedding (Qwen and Phi-3 files keep
    it), and the tensors, renamed to HuggingFace's names (Phi-3's fused
    ones split), go through `convert_weights` as `load_hf_llama`'s do. The
    model is pre-norm with RMSNorm, SwiGLU, grouped-query attention, RoPE
    with the file's base (RoPE scaling is refused) and, but for Qwen2's, no
    biases; the head is the embedding unless the file has an
    `output.weight`. The tokenizer (a
    `ByteLevelBPETokenizer` with the file's vocabulary, merges,
    pre-tokenizer, special tokens and chat template) is attached, so
    `generate` takes strings. `weights="int8_blocks"` holds the matrices as
    int8 blocks (Q8_0, Q4_0 and Q4_1 kept as stored; not for Qwen2, whose
    biases the block layers lack).

    Args:
        path: a .gguf file.
        max_sequence_length: the longest sequence the model accepts; defaults
            to the file's `{architecture}.context_length`.

    Returns:
        A float32 `keras_tfm.models.CausalLM`.

    Example:
    >>> model = load_gguf_llama(keras_tfm.zoo.smollm2.smollm2_gguf_path())
    >>> model.num_layers, model.hidden_dim, model.num_key_value_heads
    (30, 576, 3)
    >>> prompt = model.tokenizer.apply_chat_template(
    ...     "What is the capital of France?")
    >>> ids = model.tokenizer(prompt)
    >>> next_id = int(np.argmax(model(ids[None])[0, -1]))
    >>> model.tokenizer.id_to_token(next_id)
    'The'
    """
    if weights not in WEIGHT_MODES:
        raise ValueError(
            f"`weights` must be one of {WEIGHT_MODES}. Received: {weights=}"
        )
    config, tokenizer, arrays = converted_gguf(path, max_sequence_length, weights)
    if weights == "float32":
        return built_with_weights(CausalLM, config, arrays, tokenizer=tokenizer)
    blocks = {}
    for name in [name for name in arrays if ":" in name]:
        layer, _, part = name.rpartition(":")
        parts = blocks.setdefault(layer, [None] * 3)
        parts[BLOCK_PARTS.index(part)] = arrays.pop(name)
    # The float matrices the blocks replace are never created.
    return built_with_weights(
        CausalLM, config, arrays, prepare=lambda m: m.hold_blocks(blocks),
        tokenizer=tokenizer,
    )  # fmt: skip


def converted_gguf(path, max_sequence_length=None, weights="float32", mark=None):
    """(model arguments, tokenizer, weights) of a GGUF file: from the
    converted-weights cache, else converted (and cached).

    The weights: our weight path -> float32 array; with
    `weights="int8_blocks"`, "<layer path>:values" (and ":scale",
    ":offset") for each block layer and our weight paths for the norms.
    `mark`: called with a stage's name after each stage (for profiling).
    """
    mark = mark or (lambda stage: None)
    settings = {
        "loader": "gguf_llama",
        "max_sequence_length": max_sequence_length,
        "weights": weights,
    }
    entry = converted_cache.read_entry(path, settings)
    if entry is not None:
        described, weights = entry
        tokenizer = converted_cache.restore_tokenizer(described["tokenizer"])
        mark("read the converted model from the cache")
        return described["arguments"], tokenizer, weights
    config, tokenizer, weights = convert_gguf(path, max_sequence_length, weights)
    mark(f"parse the GGUF, build the tokenizer, convert to {settings['weights']}")
    described = {
        "arguments": config,
        "tokenizer": converted_cache.describe_tokenizer(tokenizer),
    }
    converted_cache.write_entry(path, settings, described, weights)
    mark("write the converted model to the cache")
    return config, tokenizer, weights


def convert_gguf(path, max_sequence_length, weights="float32"):
    """(model arguments, tokenizer, weights as `converted_gguf` says)."""
    reader = open_gguf(path)
    hf_config = gguf_hf_config(reader)
    config = convert_backbone_config(hf_config, reader.data.filename)
    if max_sequence_length is not None:
        check_window(hf_config, max_sequence_length)
        config["max_sequence_length"] = max_sequence_length
    tokenizer = convert_gguf_tokenizer(reader)
    if tokenizer.vocabulary_size() != config["vocabulary_size"]:
        raise ValueError(
            "The tokenizer and the model disagree on the vocabulary size. "
            f"Received: {tokenizer.vocabulary_size()} tokens and "
            f"llama.vocab_size={config['vocabulary_size']}"
        )
    if weights == "float32":
        tensors = gguf_tensors(reader, config)
        return (
            config,
            tokenizer,
            convert_weights(tensors, config, f"The GGUF file {path}"),
        )
    _check_block_config(config)  # before any weight is read
    blocks, floats = block_weights(gguf_tensors(reader, config, _read_blocks), config)
    for layer, parts in blocks.items():
        floats.update(
            {f"{layer}:{n}": p for n, p in zip(BLOCK_PARTS, parts, strict=True)}
        )
    return config, tokenizer, floats

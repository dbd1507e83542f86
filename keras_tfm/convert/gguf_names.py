"""llama.cpp's names (tensors, pre-tokenizers) and q/k row order.

llama.cpp's converter renames every tensor (`blk.{i}.attn_q.weight` for
`model.layers.{i}.self_attn.q_proj.weight`; Phi-3's fused `attn_qkv` and
`ffn_up` keep HuggingFace's fused tensors) and reorders the rows of each
query and key head: ggml's Llama RoPE rotates adjacent pairs (2i, 2i + 1),
HuggingFace's and ours rotate the half-split pairs (i, i + head_dim / 2).
Within a head of size d, GGUF row 2i + j (j = 0, 1) is HuggingFace row
i + j * d / 2; `unpermute_rows` puts them back (transformers does the same
when it loads a GGUF file, and tests/convert checks the result against its
weights). GGUF files name their pre-tokenizer (`tokenizer.ggml.pre`) as
llama.cpp does; `GGUF_PRE_TOKENIZERS` gives each its `ByteLevelBPETokenizer`
arguments.
"""

import re

from keras_tfm.tokenizers.byte_level_bpe_tokenizer import (
    LLAMA3_SPLIT_PATTERN,
    QWEN2_SPLIT_PATTERN,
)

# GGUF `tokenizer.ggml.pre` values -> the tokenizer's arguments, as
# llama.cpp's llama-vocab.cpp reads them (it ignores merges for Llama 3:
# a piece that is a whole vocabulary token is that token).
_LLAMA3 = dict(
    pre_tokenizer="split", split_pattern=LLAMA3_SPLIT_PATTERN, ignore_merges=True
)
_QWEN2 = dict(pre_tokenizer="split", split_pattern=QWEN2_SPLIT_PATTERN)
GGUF_PRE_TOKENIZERS = {
    "gpt2": dict(pre_tokenizer="gpt2"),
    "gpt-2": dict(pre_tokenizer="gpt2"),
    "smollm": dict(pre_tokenizer="smollm"),
    "llama-bpe": _LLAMA3,
    "llama3": _LLAMA3,
    "llama-v3": _LLAMA3,
    "qwen2": _QWEN2,
    "deepseek-r1-qwen": _QWEN2,
}

# llama.cpp's GGUF tensor names -> HuggingFace's ("{i}" the layer index).
GGUF_TO_HF = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
    "blk.{i}.attn_q.weight": "model.layers.{i}.self_attn.q_proj.weight",
    "blk.{i}.attn_k.weight": "model.layers.{i}.self_attn.k_proj.weight",
    "blk.{i}.attn_v.weight": "model.layers.{i}.self_attn.v_proj.weight",
    "blk.{i}.attn_output.weight": "model.layers.{i}.self_attn.o_proj.weight",
    "blk.{i}.ffn_gate.weight": "model.layers.{i}.mlp.gate_proj.weight",
    "blk.{i}.ffn_up.weight": "model.layers.{i}.mlp.up_proj.weight",
    "blk.{i}.ffn_down.weight": "model.layers.{i}.mlp.down_proj.weight",
    "blk.{i}.attn_norm.weight": "model.layers.{i}.input_layernorm.weight",
    "blk.{i}.ffn_norm.weight": "model.layers.{i}.post_attention_layernorm.weight",
    # Qwen2's biases, Qwen3's per-head query/key norms.
    "blk.{i}.attn_q.bias": "model.layers.{i}.self_attn.q_proj.bias",
    "blk.{i}.attn_k.bias": "model.layers.{i}.self_attn.k_proj.bias",
    "blk.{i}.attn_v.bias": "model.layers.{i}.self_attn.v_proj.bias",
    "blk.{i}.attn_q_norm.weight": "model.layers.{i}.self_attn.q_norm.weight",
    "blk.{i}.attn_k_norm.weight": "model.layers.{i}.self_attn.k_norm.weight",
}


# Phi-3 files keep HuggingFace's fused projections: `attn_qkv` (query,
# key, value rows) and `ffn_up` holding gate and up rows (`gate_up_proj`).
PHI3_GGUF_TO_HF = {
    **GGUF_TO_HF,
    "blk.{i}.attn_qkv.weight": "model.layers.{i}.self_attn.qkv_proj.weight",
    "blk.{i}.ffn_up.weight": "model.layers.{i}.mlp.gate_up_proj.weight",
}
# `general.architecture` -> its names, where they are not GGUF_TO_HF.
NAMES_BY_ARCHITECTURE = {"phi3": PHI3_GGUF_TO_HF}


def hf_name_from_gguf(name, architecture="llama"):
    """The HuggingFace name of a GGUF tensor name of a Llama-family file
    (Phi-3's fused tensors under Phi-3's names).

    Example:
    >>> hf_name_from_gguf("blk.3.attn_q.weight")
    'model.layers.3.self_attn.q_proj.weight'
    >>> hf_name_from_gguf("blk.3.ffn_up.weight", "phi3")
    'model.layers.3.mlp.gate_up_proj.weight'
    """
    table = NAMES_BY_ARCHITECTURE.get(architecture, GGUF_TO_HF)
    parts = name.split(".")
    if len(parts) > 2 and parts[0] == "blk" and parts[1].isdigit():
        pattern = ".".join(["blk", "{i}", *parts[2:]])
        if pattern in table:
            return table[pattern].format(i=parts[1])
    elif name in table:
        return table[name]
    raise ValueError(
        f"No HuggingFace name for GGUF tensor {name!r} of architecture "
        f"{architecture!r}. Known: {sorted(table)}"
    )


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


def gguf_name_from_hf(hf_name, architecture="llama"):
    """The GGUF name of a HuggingFace tensor name (`hf_name_from_gguf`'s
    inverse).

    Example:
    >>> gguf_name_from_hf("model.layers.3.self_attn.q_proj.weight")
    'blk.3.attn_q.weight'
    """
    table = NAMES_BY_ARCHITECTURE.get(architecture, GGUF_TO_HF)
    inverse = {hf: gguf for gguf, hf in table.items()}
    pattern = re.sub(r"^model\.layers\.(\d+)\.", "model.layers.{i}.", hf_name)
    layer = re.match(r"^model\.layers\.(\d+)\.", hf_name)
    return inverse[pattern].format(i=layer.group(1) if layer else "")

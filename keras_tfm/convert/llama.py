"""The Llama weight mapping: HuggingFace names <-> `keras_tfm.models.CausalLM`.

One mapping for every file format of the Llama architecture (Llama 2/3,
Mistral, SmolLM): `llama_weights` takes tensors under HuggingFace's names
(`model.layers.{i}.self_attn.q_proj.weight`, ...) as NumPy arrays, (out, in)
as PyTorch stores them, and returns our weight paths; `hf_llama_tensors` is
its inverse. A loader for another format renames its tensors to these names
first (a GGUF file: `hf_name_from_gguf`, e.g. `blk.{i}.attn_q.weight` ->
`model.layers.{i}.self_attn.q_proj.weight`, after undoing llama.cpp's q/k
row permutation) and then calls the same function.

Our model is pre-norm with RMSNorm, SwiGLU (gate and up fused into one
kernel, gate first), grouped-query attention (key and value fused, all key
heads first) and RoPE in the half-split pairing HuggingFace uses.
"""

import numpy as np

from keras_tfm.convert._hf_files import refuse_unknown_tensors, require_tensors

# model_type values whose HuggingFace model is Llama's computation exactly.
LLAMA_MODEL_TYPES = ("llama", "mistral")


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
}


def hf_name_from_gguf(name):
    """The HuggingFace name of a GGUF Llama tensor name.

    Example:
    >>> hf_name_from_gguf("blk.3.attn_q.weight")
    'model.layers.3.self_attn.q_proj.weight'
    """
    parts = name.split(".")
    if len(parts) > 2 and parts[0] == "blk" and parts[1].isdigit():
        pattern = ".".join(["blk", "{i}", *parts[2:]])
        if pattern in GGUF_TO_HF:
            return GGUF_TO_HF[pattern].format(i=parts[1])
    elif name in GGUF_TO_HF:
        return GGUF_TO_HF[name]
    raise ValueError(
        f"No HuggingFace Llama name for GGUF tensor {name!r}. Known: "
        f"{sorted(GGUF_TO_HF)}"
    )


def _layer_names(i, use_bias):
    p = f"model.layers.{i}."
    names = [
        p + "self_attn.q_proj.weight",
        p + "self_attn.k_proj.weight",
        p + "self_attn.v_proj.weight",
        p + "self_attn.o_proj.weight",
        p + "mlp.gate_proj.weight",
        p + "mlp.up_proj.weight",
        p + "mlp.down_proj.weight",
        p + "input_layernorm.weight",
        p + "post_attention_layernorm.weight",
    ]
    if use_bias:
        names += [n[: -len("weight")] + "bias" for n in names if "_proj" in n]
    return names


def llama_hf_names(config):
    """Every HuggingFace tensor name a Llama with `config` (our arguments) has."""
    names = ["model.embed_tokens.weight", "model.norm.weight"]
    if not config["tie_word_embeddings"]:
        names.append("lm_head.weight")
    for i in range(config["num_layers"]):
        names += _layer_names(i, config["use_bias"])
    return names


def llama_hf_shapes(config):
    """HuggingFace name -> shape ((out, in) for matrices) of every tensor of a
    Llama with `config` (our arguments, with `head_dim` and
    `num_key_value_heads`)."""
    hidden, inner = config["hidden_dim"], config["intermediate_dim"]
    query = config["num_heads"] * config["head_dim"]
    key = config["num_key_value_heads"] * config["head_dim"]
    vocabulary = config["vocabulary_size"]
    matrices = {
        "q_proj": (query, hidden),
        "k_proj": (key, hidden),
        "v_proj": (key, hidden),
        "o_proj": (hidden, query),
        "gate_proj": (inner, hidden),
        "up_proj": (inner, hidden),
        "down_proj": (hidden, inner),
    }
    shapes = {}
    for name in llama_hf_names(config):
        leaf = name.split(".")[-2]
        if name in ("model.embed_tokens.weight", "lm_head.weight"):
            shapes[name] = (vocabulary, hidden)
        elif leaf in matrices:
            rows = matrices[leaf][0]
            shapes[name] = matrices[leaf] if name.endswith("weight") else (rows,)
        else:  # The RMSNorm scales.
            shapes[name] = (hidden,)
    return shapes


def llama_weights(tensors, config, source="the checkpoint"):
    """Our weight path -> float32 array, from tensors under HuggingFace names.

    Args:
        tensors: HuggingFace name -> array, (out, in) for matrices. A tied
            checkpoint may include an `lm_head.weight` equal to the embedding.
        config: the `CausalLM` arguments (`num_layers`, `use_bias`,
            `tie_word_embeddings`; shapes are checked on assignment).
        source: how errors name the checkpoint.

    Returns:
        A dict for `CausalLM` weight paths (kernels (in, out)).
    """
    tensors = dict(tensors)
    if config["tie_word_embeddings"] and "lm_head.weight" in tensors:
        head = tensors.pop("lm_head.weight")
        if not np.array_equal(head, tensors.get("model.embed_tokens.weight")):
            raise ValueError(
                f"{source} has tie_word_embeddings=True but an lm_head.weight "
                "that differs from model.embed_tokens.weight"
            )
    # Non-persistent buffers some older checkpoints saved.
    tensors = {
        k: v for k, v in tensors.items() if not k.endswith("rotary_emb.inv_freq")
    }
    names = llama_hf_names(config)
    require_tensors(tensors, names, "Llama", source)
    refuse_unknown_tensors(tensors, names, "Llama", source)

    def get(name):
        return np.asarray(tensors[name], "float32")

    weights = {
        "token_embedding/embeddings": get("model.embed_tokens.weight"),
        "final_norm/scale": get("model.norm.weight"),
    }
    if not config["tie_word_embeddings"]:
        weights["lm_head/kernel"] = get("lm_head.weight").T
    for i in range(config["num_layers"]):
        p, ours = f"model.layers.{i}.", f"transformer_layer_{i}/"
        attention, mlp = p + "self_attn.", p + "mlp."
        for leaf, transpose in (("weight", True), ("bias", False)):
            if leaf == "bias" and not config["use_bias"]:
                continue
            suffix = "kernel" if leaf == "weight" else "bias"

            def t(name, transpose=transpose, leaf=leaf):
                value = get(f"{name}.{leaf}")
                return value.T if transpose else value

            weights[f"{ours}self_attention/query/{suffix}"] = t(attention + "q_proj")
            # Our fused projection: all key heads, then all value heads.
            weights[f"{ours}self_attention/key_value/{suffix}"] = np.concatenate(
                [t(attention + "k_proj"), t(attention + "v_proj")], -1
            )
            weights[f"{ours}self_attention/attention_output/{suffix}"] = t(
                attention + "o_proj"
            )
            # SwiGLU's fused input projection: gate, then up.
            weights[f"{ours}feed_forward/intermediate/{suffix}"] = np.concatenate(
                [t(mlp + "gate_proj"), t(mlp + "up_proj")], -1
            )
            weights[f"{ours}feed_forward/output/{suffix}"] = t(mlp + "down_proj")
        weights[ours + "self_attention_norm/scale"] = get(p + "input_layernorm.weight")
        weights[ours + "feed_forward_norm/scale"] = get(
            p + "post_attention_layernorm.weight"
        )
    return weights


def hf_llama_tensors(weights, config):
    """The inverse of `llama_weights`: HuggingFace name -> float32 array.

    Args:
        weights: our weight path -> array (see `_hf_files.model_weights`).
        config: the `CausalLM` arguments.

    Returns:
        A dict under HuggingFace Llama names, matrices (out, in); no
        `lm_head.weight` when the head is tied.
    """
    tensors = {
        "model.embed_tokens.weight": weights["token_embedding/embeddings"],
        "model.norm.weight": weights["final_norm/scale"],
    }
    if not config["tie_word_embeddings"]:
        tensors["lm_head.weight"] = weights["lm_head/kernel"].T
    key_width = config["num_key_value_heads"] * config["head_dim"]
    inner = config["intermediate_dim"]
    for i in range(config["num_layers"]):
        p, ours = f"model.layers.{i}.", f"transformer_layer_{i}/"
        attention, mlp = p + "self_attn.", p + "mlp."
        leaves = (("weight", "kernel"), ("bias", "bias"))
        for leaf, suffix in leaves if config["use_bias"] else leaves[:1]:

            def t(value, leaf=leaf):
                return value.T if leaf == "weight" else value

            key_value = weights[f"{ours}self_attention/key_value/{suffix}"]
            intermediate = weights[f"{ours}feed_forward/intermediate/{suffix}"]
            tensors.update(
                {
                    f"{attention}q_proj.{leaf}": t(
                        weights[f"{ours}self_attention/query/{suffix}"]
                    ),
                    f"{attention}k_proj.{leaf}": t(key_value[..., :key_width]),
                    f"{attention}v_proj.{leaf}": t(key_value[..., key_width:]),
                    f"{attention}o_proj.{leaf}": t(
                        weights[f"{ours}self_attention/attention_output/{suffix}"]
                    ),
                    f"{mlp}gate_proj.{leaf}": t(intermediate[..., :inner]),
                    f"{mlp}up_proj.{leaf}": t(intermediate[..., inner:]),
                    f"{mlp}down_proj.{leaf}": t(
                        weights[f"{ours}feed_forward/output/{suffix}"]
                    ),
                }
            )
        tensors[p + "input_layernorm.weight"] = weights[
            ours + "self_attention_norm/scale"
        ]
        tensors[p + "post_attention_layernorm.weight"] = weights[
            ours + "feed_forward_norm/scale"
        ]
    return tensors

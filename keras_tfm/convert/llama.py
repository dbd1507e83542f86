"""The Llama family: HuggingFace checkpoints <-> `CausalLM`, and the weight
mapping every Llama file format goes through.

Llama 2/3, Mistral, Qwen2, Qwen3, Phi-3 and SmolLM share one computation:
pre-norm with RMSNorm, SwiGLU (gate and up fused into one kernel, gate
first), grouped-query attention (key and value fused, all key heads first)
and RoPE in the half-split pairing HuggingFace uses; Qwen3 adds an RMSNorm
of each head's query and key (`query_key_norm`), Phi-3 fuses its
projections differently (`split_phi3_tensors` splits them into Llama's
names). One weight mapping serves every
file format: `convert_weights` takes tensors under HuggingFace's names
(`model.layers.{i}.self_attn.q_proj.weight`, ...) as NumPy arrays, (out, in)
as PyTorch stores them, and returns our weight paths; `hf_llama_tensors` is
its inverse.

A HuggingFace directory (`load_hf_llama`, `save_hf_llama`) holds
config.json (`model_type` "llama", "mistral", "qwen2", "qwen3" or "phi3"), the
weights as
safetensors (one file or shards, read by hf_directory.py) and a byte-level
BPE tokenizer.json with tokenizer_config.json (special tokens, chat
template). GGUF files (llama.cpp's format) are read by `gguf_llama.py`
into the same `convert_backbone_config` and `convert_weights`.
"""

from pathlib import Path

import numpy as np

from keras_tfm.convert.config_checks import (
    check_attributes,
    check_model_class,
    check_model_type,
    check_tokenizer_kind,
    check_vocabulary_size,
)
from keras_tfm.convert.hf_directory import (
    check_directory,
    read_json,
    read_safetensors,
    write_json,
    write_safetensors,
)
from keras_tfm.convert.hf_tokenizer_files import (
    read_vocab_and_merges,
    write_tokenizer_json,
)
from keras_tfm.convert.weights import (
    built_with_weights,
    model_weights,
    refuse_unknown_tensors,
    require_tensors,
)
from keras_tfm.models.causal_lm import CausalLM
from keras_tfm.models.legacy_configs import flat_arguments
from keras_tfm.saving import atomic_directory
from keras_tfm.tokenizers.byte_level_bpe_tokenizer import ByteLevelBPETokenizer

# model_type values whose HuggingFace model is Llama's computation exactly.
LLAMA_MODEL_TYPES = ("llama", "mistral")
# Every model_type `load_hf_llama` reads: Qwen2 adds q/k/v biases, Qwen3
# the per-head query/key norms, Phi-3 fuses its projections.
MODEL_TYPES = (*LLAMA_MODEL_TYPES, "qwen2", "qwen3", "phi3")
# model_types whose `sliding_window` caps `max_sequence_length`.
SLIDING_WINDOW_TYPES = ("mistral", "phi3")
# Qwen3's per-head norms: HuggingFace leaf -> our sublayer of the attention.
QUERY_KEY_NORMS = (("q_norm.weight", "query_norm"), ("k_norm.weight", "key_norm"))


def _layer_names(i, use_bias, query_key_norm=False):
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
    if query_key_norm:
        names += [p + "self_attn.q_norm.weight", p + "self_attn.k_norm.weight"]
    return names


def llama_hf_names(config):
    """Every HuggingFace tensor name a Llama with `config` (our arguments) has."""
    names = ["model.embed_tokens.weight", "model.norm.weight"]
    if not config["tie_word_embeddings"]:
        names.append("lm_head.weight")
    for i in range(config["num_layers"]):
        names += _layer_names(
            i, config["use_bias"], config.get("query_key_norm", False)
        )
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
        elif leaf in ("q_norm", "k_norm"):  # one scale per head feature
            shapes[name] = (config["head_dim"],)
        else:  # The RMSNorm scales.
            shapes[name] = (hidden,)
    return shapes


# Phi-3's fused projections (a layer's leaf -> the Llama leaves whose rows it
# stacks, in order): query heads, then key heads, then value heads; gate,
# then up.
PHI3_FUSED = {
    "self_attn.qkv_proj": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
    "mlp.gate_up_proj": ("mlp.gate_proj", "mlp.up_proj"),
}


def _phi3_parts(config):
    """(fused name, [(Llama name, rows)]) of every Phi-3 fused tensor."""
    shapes = llama_hf_shapes(config)
    parts = []
    for i in range(config["num_layers"]):
        for leaf in ("weight", "bias") if config["use_bias"] else ("weight",):
            for fused, names in PHI3_FUSED.items():
                names = [f"model.layers.{i}.{name}.{leaf}" for name in names]
                parts.append(
                    (
                        f"model.layers.{i}.{fused}.{leaf}",
                        [(name, shapes[name][0]) for name in names],
                    )
                )
    return parts


def phi3_hf_shapes(config):
    """`llama_hf_shapes` with Phi-3's fused tensors in place of their parts."""
    shapes = llama_hf_shapes(config)
    for fused, names in _phi3_parts(config):
        columns = shapes[names[0][0]][1:]  # () for a bias
        for name, _ in names:
            del shapes[name]
        shapes[fused] = (sum(rows for _, rows in names), *columns)
    return shapes


def split_phi3_tensors(tensors, config, source="the checkpoint"):
    """Phi-3's tensors under Llama's names: each `qkv_proj` split into its
    `q_proj`, `k_proj` and `v_proj` rows, each `gate_up_proj` into
    `gate_proj` and `up_proj` (`PHI3_FUSED`).

    Args:
        tensors: HuggingFace name -> array, (out, in) for matrices; a value
            may be a tuple of arrays (out, ...) each (int8 blocks), split
            alike.
        config: the `CausalLM` arguments, with `head_dim` and
            `num_key_value_heads`.
        source: how errors name the checkpoint.

    Returns:
        A new dict; the other tensors are passed through.
    """
    tensors = dict(tensors)
    for fused, names in _phi3_parts(config):
        if fused not in tensors:
            raise ValueError(f"The Phi-3 checkpoint {source} lacks {fused}")
        value = tensors.pop(fused)
        parts = value if isinstance(value, tuple) else (value,)
        want = sum(rows for _, rows in names)
        if any(len(part) != want for part in parts):
            raise ValueError(
                f"{fused} in {source} must have {want} rows "
                f"({' + '.join(str(rows) for _, rows in names)}). Received: "
                f"shape={tuple(parts[0].shape)}"
            )
        start = 0
        for name, rows in names:
            if name in tensors:
                raise ValueError(
                    f"The Phi-3 checkpoint {source} has both {fused} and {name}"
                )
            pieces = tuple(part[start : start + rows] for part in parts)
            tensors[name] = pieces if isinstance(value, tuple) else pieces[0]
            start += rows
    return tensors


def convert_weights(tensors, config, source="the checkpoint"):
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
        if config.get("query_key_norm", False):
            for hf, ours_norm in QUERY_KEY_NORMS:
                weights[f"{ours}self_attention/{ours_norm}/scale"] = get(attention + hf)
    return weights


def hf_llama_tensors(weights, config):
    """The inverse of `convert_weights`: HuggingFace name -> float32 array.

    Args:
        weights: our weight path -> array (see `hf_directory.model_weights`).
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
        if config.get("query_key_norm", False):
            for hf, ours_norm in QUERY_KEY_NORMS:
                tensors[attention + hf] = weights[
                    f"{ours}self_attention/{ours_norm}/scale"
                ]
    return tensors


def _rope_theta(config, where):
    """The RoPE base; any RoPE scaling other than none is refused."""
    parameters = config.get("rope_parameters") or {}
    scaling = config.get("rope_scaling") or {}
    for key, spec in (("rope_parameters", parameters), ("rope_scaling", scaling)):
        kind = spec.get("rope_type", spec.get("type", "default"))
        if kind != "default":
            raise ValueError(
                f"RoPE scaling is not supported (only rope_type 'default'). "
                f"Received: {key}.rope_type={kind!r} in {where}"
            )
    theta = parameters.get("rope_theta", config.get("rope_theta", 10000.0))
    return float(theta)


def _check_whole_head_rope(config, where):
    """Refuses RoPE over part of each head (Phi-4-mini's
    `partial_rotary_factor` 0.75), at the top level or in the RoPE dicts."""
    for key, spec in (
        ("partial_rotary_factor", config),
        ("rope_parameters.partial_rotary_factor", config.get("rope_parameters")),
        ("rope_scaling.partial_rotary_factor", config.get("rope_scaling")),
    ):
        factor = (spec or {}).get("partial_rotary_factor", 1.0)
        if factor is not None and float(factor) != 1.0:
            raise ValueError(
                "Only RoPE over whole heads is supported (partial_rotary_factor "
                f"1.0). Received: {key}={factor!r} in {where}"
            )


def convert_backbone_config(config, directory="."):
    """`CausalLM` arguments from a Llama-family config.json dict."""
    where = f"{directory}/config.json"
    model_type = check_model_type(config, MODEL_TYPES, "Llama-family", directory)
    if model_type in ("qwen2", "qwen3") and config.get("use_sliding_window"):
        raise ValueError(
            "Qwen's sliding-window attention is not supported. Received: "
            f"use_sliding_window={config['use_sliding_window']!r} in {where}"
        )
    if config.get("hidden_act", "silu") != "silu":
        raise ValueError(
            "Only SwiGLU feed-forward networks (hidden_act 'silu') are "
            f"supported. Received: hidden_act={config['hidden_act']!r} in {where}"
        )
    # One `use_bias` covers every projection; the biases a checkpoint lacks
    # (Qwen2's output and feed-forward ones, or those of one of
    # `attention_bias` / `mlp_bias`) load as zeros: see `_zero_biases`.
    use_bias = model_type == "qwen2" or any(
        bool(config.get(key, False)) for key in ("attention_bias", "mlp_bias")
    )
    for key in ("pretraining_tp",):
        if config.get(key, 1) != 1:
            raise ValueError(f"Received: {key}={config[key]!r} in {where}")
    _check_whole_head_rope(config, where)
    num_heads = config["num_attention_heads"]
    hidden = config["hidden_size"]
    max_length = config["max_position_embeddings"]
    # Mistral's and Phi-3's sliding window changes nothing for sequences
    # that fit in it.
    window = config.get("sliding_window")
    if model_type in SLIDING_WINDOW_TYPES and window is not None:
        max_length = min(max_length, window)
    return dict(
        vocabulary_size=config["vocab_size"],
        num_layers=config["num_hidden_layers"],
        num_heads=num_heads,
        hidden_dim=hidden,
        intermediate_dim=config["intermediate_size"],
        max_sequence_length=max_length,
        head_dim=config.get("head_dim") or hidden // num_heads,
        num_key_value_heads=config.get("num_key_value_heads") or num_heads,
        activation="swiglu",
        dropout=float(config.get("attention_dropout", 0.0)),
        normalize_first=True,
        normalization="rms_norm",
        layer_norm_epsilon=float(config.get("rms_norm_eps", 1e-6)),
        position_encoding="rotary",
        rotary_max_wavelength=_rope_theta(config, where),
        use_bias=use_bias,
        tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
        padding_id=None,
        query_key_norm=model_type == "qwen3",
    )


ATTENTION_PROJECTIONS = ("self_attn.q_proj", "self_attn.k_proj",
                         "self_attn.v_proj", "self_attn.o_proj")  # fmt: skip
MLP_PROJECTIONS = ("mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")


def _zero_biases(hf_config):
    """`(projections, who)`: the projections whose bias the checkpoint has
    none of, though the model (one `use_bias` for all) has one; `who` starts
    the error for a checkpoint that has one after all.

    transformers' `attention_bias` covers the query, key, value and output
    projections, `mlp_bias` the gate, up and down ones; Qwen2 has query,
    key and value biases only.
    """
    if hf_config.get("model_type") == "qwen2":
        return ("self_attn.o_proj", *MLP_PROJECTIONS), "A Qwen2 checkpoint has"
    attention_bias = bool(hf_config.get("attention_bias", False))
    mlp_bias = bool(hf_config.get("mlp_bias", False))
    if attention_bias and not mlp_bias:
        return MLP_PROJECTIONS, "With mlp_bias=false a checkpoint has"
    if mlp_bias and not attention_bias:
        return ATTENTION_PROJECTIONS, "With attention_bias=false a checkpoint has"
    return (), ""


def _add_zero_biases(tensors, config, projections, who):
    """`tensors` with zero biases for `projections` (the same computation)."""
    tensors = dict(tensors)
    head_dim = config.get("head_dim") or config["hidden_dim"] // config["num_heads"]
    kv_heads = config.get("num_key_value_heads") or config["num_heads"]
    sizes = {
        "self_attn.q_proj": config["num_heads"] * head_dim,
        "self_attn.k_proj": kv_heads * head_dim,
        "self_attn.v_proj": kv_heads * head_dim,
        "self_attn.o_proj": config["hidden_dim"],
        "mlp.gate_proj": config["intermediate_dim"],
        "mlp.up_proj": config["intermediate_dim"],
        "mlp.down_proj": config["hidden_dim"],
    }
    for i in range(config["num_layers"]):
        for name in projections:
            bias = f"model.layers.{i}.{name}.bias"
            if bias in tensors:
                raise ValueError(f"{who} no {bias}, but this one does")
            tensors[bias] = np.zeros((sizes[name],), "float32")
    return tensors


def check_window(hf_config, max_sequence_length):
    """Refuses a `max_sequence_length` beyond a Mistral's or Phi-3's
    `sliding_window` (our attention has none)."""
    window = hf_config.get("sliding_window")
    if hf_config.get("model_type") in SLIDING_WINDOW_TYPES and window is not None:
        if max_sequence_length > window:
            raise ValueError(
                "`max_sequence_length` must not exceed the checkpoint's "
                f"sliding_window={window}: our attention has no window. "
                f"Received: max_sequence_length={max_sequence_length}"
            )


def _token(value):
    return value.get("content") if isinstance(value, dict) else value


def convert_tokenizer(directory, config):
    """A `ByteLevelBPETokenizer` from the directory's tokenizer.json and
    tokenizer_config.json, checked against config.json (`config`)."""
    vocabulary_size = config["vocab_size"]
    vocabulary, merges, special, options = read_vocab_and_merges(directory)
    if len(vocabulary) != vocabulary_size:
        raise ValueError(
            "The tokenizer and config.json disagree on the vocabulary size. "
            f"Received: {len(vocabulary)} tokens and vocab_size={vocabulary_size}"
        )
    settings = read_json(directory / "tokenizer_config.json", required=False)
    roles = {}
    for key in ("bos_token", "eos_token", "pad_token"):
        token = _token(settings.get(key))
        if token is not None and token not in vocabulary:
            raise ValueError(
                f"The {key} is not in the vocabulary. Received: {key}={token!r} "
                f"in {directory}/tokenizer_config.json"
            )
        roles[key] = token
    return ByteLevelBPETokenizer(
        vocabulary=vocabulary,
        merges=merges,
        unsplittable_tokens=special,
        chat_template=settings.get("chat_template"),
        **options,
        **roles,
    )


def load_hf_llama(directory, max_sequence_length=None):
    """Loads a HuggingFace Llama-family checkpoint as a `CausalLM`.

    Llama, Mistral, Qwen2, Qwen3 and Phi-3 checkpoints (`model_type`
    "llama", "mistral", "qwen2", "qwen3", "phi3"; SmolLM is a Llama) become a pre-norm
    `CausalLM` with RMSNorm, SwiGLU, grouped-query attention (the config's
    `num_key_value_heads` and `head_dim`), RoPE with the config's base
    (`rope_theta`; RoPE scaling is refused), biases when `attention_bias` or
    `mlp_bias` say so (the ones a checkpoint lacks load as zeros, the same
    computation), and the head tied or untied as `tie_word_embeddings` says.
    `padding_id` is None (Llama masks no token id). A Mistral or Phi-3
    sliding window caps `max_sequence_length` (within the window the
    attention is the same). RoPE over part of each head
    (`partial_rotary_factor` other than 1.0, Phi-4-mini's 0.75) is refused
    by name. Phi-3's fused `qkv_proj` (query, key, value rows) and
    `gate_up_proj` (gate, up rows) are split into Llama's projections
    (`split_phi3_tensors`); its LongRoPE (`rope_type` "longrope" or "su":
    Phi-3-128k, Phi-3.5) is refused as RoPE scaling is, and its
    `resid_pdrop`/`embd_pdrop` are ignored (inference: the model's dropout
    is `attention_dropout`); `save_hf_llama` writes it back as a Llama,
    which transformers reads. Qwen2's query, key and value biases load into a model with
    `use_bias=True` whose output and feed-forward biases are zeros (the same
    computation; `save_hf_llama` then writes a Llama with all biases).
    Qwen3's per-head `q_norm` and `k_norm` load into a model with
    `query_key_norm=True` (`save_hf_llama` writes it back as a Qwen3). The
    tokenizer is attached: a `ByteLevelBPETokenizer` (keras-hub's byte-level
    BPE) with the vocabulary, merges and pre-tokenization of tokenizer.json
    (GPT-2's split, SmolLM's digit split, or the Split regex of Llama 3 and
    Qwen2, with Qwen2's NFC normalizer and Llama 3's `ignore_merges`), the
    special tokens and chat template of tokenizer_config.json.
    SentencePiece-style BPE tokenizers (Llama 2, Mistral v0.1) are refused.
    It adds no BOS token (Llama 3's post-processor does): prepend
    `tokenizer.start_token_id` where the checkpoint expects one.

    Args:
        directory: a folder with config.json, model.safetensors (or an index
            of shards) and tokenizer.json.
        max_sequence_length: optional; by default the config's
            `max_position_embeddings`.

    Returns:
        A float32 `keras_tfm.models.CausalLM` with the tokenizer attached.

    Example:
    >>> model = load_hf_llama(FIXTURES / "tiny_llama_gqa_hf")
    >>> model.num_key_value_heads, model.tie_word_embeddings, model.padding_id
    (2, False, None)
    """
    directory = check_directory(directory)
    hf_config = read_json(directory / "config.json")
    config = convert_backbone_config(hf_config, directory)
    if max_sequence_length is not None:
        check_window(hf_config, max_sequence_length)
        config["max_sequence_length"] = max_sequence_length
    tensors = read_safetensors(directory)
    if hf_config.get("model_type") == "phi3":
        tensors = split_phi3_tensors(tensors, config, str(directory))
    projections, who = _zero_biases(hf_config)
    tensors = _add_zero_biases(tensors, config, projections, who)
    weights = convert_weights(tensors, config, str(directory))
    tokenizer = convert_tokenizer(directory, hf_config)
    return built_with_weights(CausalLM, config, weights, tokenizer=tokenizer)


def _saveable_config(model, tokenizer):
    check_model_class(model, CausalLM)
    check_attributes(
        "Llama", model, normalize_first=True, normalization="rms_norm",
        position_encoding="rotary", activation="swiglu",
    )  # fmt: skip
    check_tokenizer_kind(
        tokenizer,
        isinstance(tokenizer, ByteLevelBPETokenizer),
        "a ByteLevelBPETokenizer (as load_hf_llama attaches), or the model "
        "must have one attached",
    )
    check_vocabulary_size(tokenizer, model)
    attention = model.backbone.transformer_layers[0].self_attention
    config = flat_arguments(model)
    config["head_dim"] = attention.effective_head_dim
    config["num_key_value_heads"] = attention.effective_num_key_value_heads
    return config


def _refuse_feed_forward_biases(tensors):
    """Drops the feed-forward biases of a Qwen3, refused unless all zero."""
    for name in [n for n in tensors if n.endswith("_proj.bias") and ".mlp." in n]:
        if np.any(tensors.pop(name)):
            raise ValueError(
                "A Qwen3 checkpoint (what a model with query_key_norm=True is "
                f"saved as) has no feed-forward biases, but {name} is not zero"
            )


def save_hf_llama(model, directory, tokenizer=None, overwrite=False):
    """Writes a `CausalLM` and its tokenizer as a HuggingFace Llama checkpoint.

    The folder gets config.json (a `LlamaForCausalLM` config with
    `rope_parameters`; `Qwen3ForCausalLM` for a model with
    `query_key_norm`, whose feed-forward biases, if any, must be zero),
    model.safetensors (float32, the names of `convert_weights`; no
    lm_head.weight when tied), tokenizer.json (made by `tokenizers`,
    with the tokenizer's pre-tokenization) and tokenizer_config.json.
    `load_hf_llama` and transformers' `AutoModelForCausalLM` /
    `AutoTokenizer` read it back.

    Args:
        model: a pre-norm `CausalLM` with RMSNorm, SwiGLU and rotary
            positions (biases, grouped-query attention, head size and a
            tied or untied head as it has them).
        directory: the folder to write (created, or empty).
        tokenizer: a `ByteLevelBPETokenizer`; by default the model's
            attached tokenizer.
        overwrite: replace a `directory` that holds files, atomically
            (`keras_tfm.saving.atomic_directory`).

    Returns:
        The Llama checkpoint's folder, as a `pathlib.Path`.

    Example:
    >>> import tempfile
    >>> model = load_hf_llama(FIXTURES / "tiny_llama_tied_hf")
    >>> folder = save_hf_llama(model, tempfile.mkdtemp())
    >>> sorted(path.name for path in folder.iterdir())  # doctest: +NORMALIZE_WHITESPACE
    ['config.json', 'model.safetensors', 'tokenizer.json',
     'tokenizer_config.json']
    """
    tokenizer = model.tokenizer if tokenizer is None else tokenizer
    config = _saveable_config(model, tokenizer)
    tensors = hf_llama_tensors(model_weights(model), config)
    # A Llama has no query/key norms; a Qwen3 no feed-forward biases.
    family = "Qwen3" if model.query_key_norm else "Llama"
    if model.query_key_norm and model.use_bias:
        _refuse_feed_forward_biases(tensors)
    target = Path(directory)
    with atomic_directory(target, overwrite) as directory:

        def token_id(token):
            return None if token is None else int(tokenizer.token_to_id(token))

        hf_config = {
            "architectures": [f"{family}ForCausalLM"],
            "model_type": family.lower(),
            "vocab_size": model.vocabulary_size,
            "hidden_size": model.hidden_dim,
            "intermediate_size": model.intermediate_dim,
            "num_hidden_layers": model.num_layers,
            "num_attention_heads": model.num_heads,
            "num_key_value_heads": config["num_key_value_heads"],
            "head_dim": config["head_dim"],
            "hidden_act": "silu",
            "max_position_embeddings": model.max_sequence_length,
            "rms_norm_eps": model.layer_norm_epsilon,
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": model.rotary_max_wavelength,
            },
            "attention_bias": model.use_bias,
            **({} if model.query_key_norm else {"mlp_bias": model.use_bias}),
            "attention_dropout": model.dropout,
            "tie_word_embeddings": model.tie_word_embeddings,
            "bos_token_id": token_id(tokenizer.bos_token),
            "eos_token_id": token_id(tokenizer.eos_token),
            "pad_token_id": token_id(tokenizer.pad_token),
            "initializer_range": 0.02,
        }
        write_json(directory / "config.json", hf_config)
        write_safetensors(tensors, directory)
        write_tokenizer_json(directory, tokenizer)
        settings = {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "model_max_length": model.max_sequence_length,
            "bos_token": tokenizer.bos_token,
            "eos_token": tokenizer.eos_token,
            "pad_token": tokenizer.pad_token,
            "add_bos_token": False,
            "add_eos_token": False,
        }
        if tokenizer.chat_template is not None:
            settings["chat_template"] = tokenizer.chat_template
        write_json(directory / "tokenizer_config.json", settings)
    return target

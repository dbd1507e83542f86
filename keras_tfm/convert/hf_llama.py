"""HuggingFace-format Llama-family checkpoints <-> `keras_tfm.models.CausalLM`.

A checkpoint directory holds config.json (`model_type` "llama", "mistral"
or "qwen2"), the weights as safetensors (names and layout in llama.py, the
one Llama mapping, which the GGUF loader uses too) and a byte-level BPE
tokenizer.json with tokenizer_config.json (special tokens, chat template).
"""

from pathlib import Path

import numpy as np

from keras_tfm.convert._hf_bpe import read_vocab_and_merges, write_tokenizer_json
from keras_tfm.convert._hf_files import (
    assign_weights,
    check_directory,
    check_format_settings,
    check_model_type,
    model_weights,
    read_json,
    read_safetensors,
    write_json,
    write_safetensors,
)
from keras_tfm.convert.gguf_tokenizer import GGUFBytePairTokenizer
from keras_tfm.convert.llama import LLAMA_MODEL_TYPES, hf_llama_tensors, llama_weights
from keras_tfm.models.causal_lm import CausalLM
from keras_tfm.saving import atomic_directory


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


def llama_config(config, directory="."):
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
    head_dim = config["head_dim"]
    sizes = {
        "self_attn.q_proj": config["num_heads"] * head_dim,
        "self_attn.k_proj": config["num_key_value_heads"] * head_dim,
        "self_attn.v_proj": config["num_key_value_heads"] * head_dim,
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


def _load_tokenizer(directory, vocabulary_size):
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
    return GGUFBytePairTokenizer(
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
    refused), biases when `attention_bias` or `mlp_bias` say so, and the
    head tied or untied as `tie_word_embeddings` says. `padding_id` is None
    (Llama masks no token id). A Mistral sliding window caps
    `max_sequence_length` (within the window the attention is the same).
    The model has one `use_bias` for every projection: the biases a
    checkpoint has none of (the feed-forward ones with `attention_bias` but
    not `mlp_bias`, the attention ones the other way round, Qwen2's output
    and feed-forward ones beside its query, key and value biases) load as
    zeros, the same computation; `save_hf_llama` then writes a Llama with
    all biases.
    The tokenizer is attached: a `GGUFBytePairTokenizer` (keras-hub's
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
    config = llama_config(hf_config, directory)
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
    weights = llama_weights(tensors, config, str(directory))
    tokenizer = _load_tokenizer(directory, config["vocabulary_size"])
    model = CausalLM(**config, tokenizer=tokenizer, dtype="float32")
    assign_weights(model, weights)
    return model


def _saveable_config(model, tokenizer):
    if not isinstance(model, CausalLM):
        raise ValueError(
            f"`model` must be a keras_tfm CausalLM. Received: {type(model).__name__}"
        )
    checks = {
        "normalize_first": (True, model.normalize_first),
        "normalization": ("rms_norm", model.normalization),
        "position_encoding": ("rotary", model.position_encoding),
        "activation": ("swiglu", model.activation),
    }
    check_format_settings("Llama", checks)
    if not isinstance(tokenizer, GGUFBytePairTokenizer):
        raise ValueError(
            "`tokenizer` must be a GGUFBytePairTokenizer (as load_hf_llama "
            "attaches), or the model must have one attached. Received: "
            f"tokenizer={type(tokenizer).__name__}"
        )
    if tokenizer.vocabulary_size() != model.vocabulary_size:
        raise ValueError(
            "The tokenizer and the model disagree on the vocabulary size. "
            f"Received: {tokenizer.vocabulary_size()} tokens and "
            f"vocabulary_size={model.vocabulary_size}"
        )
    attention = model.transformer_layers[0].self_attention
    config = model.get_config()
    config["head_dim"] = attention.effective_head_dim
    config["num_key_value_heads"] = attention.effective_num_key_value_heads
    return config


def save_hf_llama(model, directory, tokenizer=None, overwrite=False):
    """Writes a `CausalLM` and its tokenizer as a HuggingFace Llama checkpoint.

    The folder gets config.json (a `LlamaForCausalLM` config with
    `rope_parameters`), model.safetensors (float32, the names of llama.py;
    no lm_head.weight when tied), tokenizer.json (made by `tokenizers`,
    with the tokenizer's pre-tokenization) and tokenizer_config.json.
    `load_hf_llama` and transformers' `AutoModelForCausalLM` /
    `AutoTokenizer` read it back.

    Args:
        model: a pre-norm `CausalLM` with RMSNorm, SwiGLU and rotary
            positions (biases, grouped-query attention, head size and a
            tied or untied head as it has them).
        directory: the folder to write (created, or empty).
        tokenizer: a `GGUFBytePairTokenizer`; by default the model's
            attached tokenizer.
        overwrite: whether to replace a `directory` that holds files. The
            files are written to a sibling folder first, which replaces
            `directory` only once complete (`keras_tfm.saving.atomic_directory`).

    Returns:
        The folder, as a `pathlib.Path`.

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
    with atomic_directory(directory, overwrite) as tmp:
        _write_files(model, tokenizer, config, tmp)
    return Path(directory)


def _write_files(model, tokenizer, config, directory):
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

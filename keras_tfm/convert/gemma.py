"""Gemma and Gemma 2: HuggingFace checkpoints <-> `CausalLM`.

Gemma is Llama's layout with four differences, each a `CausalLM` option:
GeGLU (tanh GELU gate) instead of SwiGLU, embeddings multiplied by
sqrt(hidden_size) (`scale_embeddings`), RMSNorm scaled by (1 + weight)
(converted: our scale is the checkpoint's weight plus one) and a tied head.
Gemma 2 adds a norm after each sublayer (`sandwich_norm`: its
post_attention_layernorm and post_feedforward_layernorm; the FFN's input
norm is its pre_feedforward_layernorm), soft-capped attention and final
logits (`attention_logit_soft_cap`, `final_logit_soft_cap`), queries
scaled by `query_pre_attn_scalar ** -0.5` (folded into the query
projection: ours scale by head_dim ** -0.5) and sliding-window attention
on alternate layers (the same as global attention within the window, so
the window caps `max_sequence_length`, as Mistral's does).

The projections map as `llama.convert_weights` maps them; the tokenizer is
the checkpoint's SentencePiece model (tokenizer.model) as a
`SentencePieceBPETokenizer`.
"""

from pathlib import Path

import numpy as np

from keras_tfm.convert import llama
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
from keras_tfm.convert.weights import built_with_weights, model_weights
from keras_tfm.models.causal_lm import CausalLM
from keras_tfm.models.legacy_configs import flat_arguments
from keras_tfm.saving import atomic_directory
from keras_tfm.tokenizers.sentencepiece_bpe_tokenizer import SentencePieceBPETokenizer

MODEL_TYPES = ("gemma", "gemma2")
GELU_TANH = "gelu_pytorch_tanh"
# Gemma 2's sublayer-output norms: HuggingFace leaf -> our block's sublayer.
POST_NORMS = (
    ("post_attention_layernorm", "self_attention_post_norm"),
    ("post_feedforward_layernorm", "feed_forward_post_norm"),
)


def convert_backbone_config(config, directory="."):
    """`CausalLM` arguments from a Gemma or Gemma 2 config.json dict."""
    where = f"{directory}/config.json"
    model_type = check_model_type(config, MODEL_TYPES, "Gemma", directory)
    activation = config.get("hidden_activation") or config.get("hidden_act")
    if activation not in (GELU_TANH, None if model_type == "gemma" else GELU_TANH):
        raise ValueError(
            f"Only the tanh GELU gate ({GELU_TANH!r}) is supported. Received: "
            f"hidden_activation={activation!r} in {where}"
        )
    if config.get("attention_bias"):
        raise ValueError(f"Received: attention_bias=True in {where}")
    head_dim = (
        config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    )
    max_length = config["max_position_embeddings"]
    gemma2 = model_type == "gemma2"
    window = config.get("sliding_window") if gemma2 else None
    if window is not None:
        max_length = min(max_length, window)
    return dict(
        vocabulary_size=config["vocab_size"],
        num_layers=config["num_hidden_layers"],
        num_heads=config["num_attention_heads"],
        hidden_dim=config["hidden_size"],
        intermediate_dim=config["intermediate_size"],
        max_sequence_length=max_length,
        head_dim=head_dim,
        num_key_value_heads=config.get("num_key_value_heads")
        or config["num_attention_heads"],
        activation="geglu_approximate",
        dropout=float(config.get("attention_dropout", 0.0)),
        normalize_first=True,
        normalization="rms_norm",
        layer_norm_epsilon=float(config.get("rms_norm_eps", 1e-6)),
        position_encoding="rotary",
        rotary_max_wavelength=llama._rope_theta(config, where),
        use_bias=False,
        tie_word_embeddings=bool(config.get("tie_word_embeddings", True)),
        padding_id=None,
        scale_embeddings=True,
        sandwich_norm=gemma2,
        attention_logit_soft_cap=config.get("attn_logit_softcapping")
        if gemma2
        else None,
        final_logit_soft_cap=config.get("final_logit_softcapping") if gemma2 else None,
    )


def query_scale_factor(config, head_dim):
    """What the query projection is multiplied by so that our 1/sqrt(head_dim)
    scale is the checkpoint's 1/sqrt(query_pre_attn_scalar) (1.0 for Gemma)."""
    scalar = config.get("query_pre_attn_scalar", head_dim)
    return float(np.sqrt(head_dim / scalar))


def convert_weights(tensors, hf_config, config, source="the checkpoint"):
    """Our weight path -> float32 array, from a Gemma checkpoint's tensors.

    The norms gain one (Gemma's RMSNorm scales by 1 + weight), Gemma 2's
    sublayer-output norms map to the `*_post_norm` sublayers, its
    pre_feedforward_layernorm to the FFN's input norm, the query projection
    absorbs `query_scale_factor`, and the rest goes through
    `llama.convert_weights`.
    """
    tensors = {k: np.asarray(v, "float32") for k, v in tensors.items()}
    gemma2 = hf_config.get("model_type") == "gemma2"
    factor = query_scale_factor(hf_config, config["head_dim"])
    post = {}
    for i in range(config["num_layers"]):
        p = f"model.layers.{i}."
        if gemma2:
            for hf, ours in POST_NORMS:
                post[f"transformer_layer_{i}/{ours}/scale"] = _pop(tensors, p + hf) + 1
            tensors[p + "post_attention_layernorm.weight"] = _pop(
                tensors, p + "pre_feedforward_layernorm"
            )
        tensors[p + "self_attn.q_proj.weight"] = (
            tensors[p + "self_attn.q_proj.weight"] * factor
        )
    for name in list(tensors):
        if name.endswith("norm.weight"):
            tensors[name] = tensors[name] + 1
    weights = llama.convert_weights(tensors, config, source)
    weights.update(post)
    return weights


def _pop(tensors, name):
    name = f"{name}.weight"
    if name not in tensors:
        raise ValueError(f"A Gemma 2 checkpoint has a {name}; this one has none")
    return tensors.pop(name)


def hf_gemma_tensors(weights, config):
    """The inverse of `convert_weights` for a model with `query_scale_factor`
    1: HuggingFace name -> float32 array."""
    tensors = llama.hf_llama_tensors(weights, config)
    for i in range(config["num_layers"]):
        p, ours = f"model.layers.{i}.", f"transformer_layer_{i}/"
        if config["sandwich_norm"]:
            tensors[p + "pre_feedforward_layernorm.weight"] = tensors.pop(
                p + "post_attention_layernorm.weight"
            )
            for hf, norm in POST_NORMS:
                tensors[f"{p}{hf}.weight"] = weights[f"{ours}{norm}/scale"]
    return {
        name: (value - 1 if name.endswith("norm.weight") else value)
        for name, value in tensors.items()
    }


def convert_tokenizer(directory, config):
    """The checkpoint's tokenizer.model as a `SentencePieceBPETokenizer`, with
    tokenizer_config.json's special tokens and chat template."""
    path = Path(directory) / "tokenizer.model"
    if not path.is_file():
        raise ValueError(
            f"A Gemma checkpoint's tokenizer is its tokenizer.model; {directory} "
            "has none"
        )
    settings = read_json(Path(directory) / "tokenizer_config.json", required=False)
    roles = {
        key: llama._token(settings.get(key))
        for key in ("bos_token", "eos_token", "pad_token")
    }
    tokenizer = SentencePieceBPETokenizer(
        path.read_bytes(), chat_template=settings.get("chat_template"), **roles
    )
    if tokenizer.vocabulary_size() != config["vocab_size"]:
        raise ValueError(
            "The tokenizer and config.json disagree on the vocabulary size. "
            f"Received: {tokenizer.vocabulary_size()} pieces and "
            f"vocab_size={config['vocab_size']}"
        )
    return tokenizer


def load_hf_gemma(directory, max_sequence_length=None):
    """Loads a HuggingFace Gemma or Gemma 2 checkpoint as a `CausalLM`.

    `model_type` "gemma" or "gemma2" (Gemma 3 is refused): a pre-norm
    `CausalLM` with GeGLU, grouped-query attention, RoPE with the config's
    base, embeddings scaled by sqrt(hidden_size) and a tied head; for Gemma
    2 also the sublayer-output norms and the attention and final logit soft
    caps (see the module docstring). A Gemma 2 sliding window caps
    `max_sequence_length`. The tokenizer (tokenizer.model, the special
    tokens and chat template of tokenizer_config.json) is attached.

    Args:
        directory: a folder with config.json, model.safetensors (or shards)
            and tokenizer.model.
        max_sequence_length: optional; by default the config's
            `max_position_embeddings` (capped by Gemma 2's `sliding_window`).

    Returns:
        A float32 `keras_tfm.models.CausalLM` with the tokenizer attached.

    Example:
    >>> model = load_hf_gemma(FIXTURES / "tiny_gemma2_hf")
    >>> model.sandwich_norm, model.final_logit_soft_cap
    (True, 3.0)
    """
    directory = check_directory(directory)
    hf_config = read_json(directory / "config.json")
    config = convert_backbone_config(hf_config, directory)
    if max_sequence_length is not None:
        if max_sequence_length > config["max_sequence_length"]:
            raise ValueError(
                "`max_sequence_length` must not exceed the checkpoint's "
                f"{config['max_sequence_length']} (its max_position_embeddings, "
                "or sliding_window: our attention has no window). Received: "
                f"max_sequence_length={max_sequence_length}"
            )
        config["max_sequence_length"] = max_sequence_length
    weights = convert_weights(
        read_safetensors(directory), hf_config, config, str(directory)
    )
    tokenizer = convert_tokenizer(directory, hf_config)
    return built_with_weights(CausalLM, config, weights, tokenizer=tokenizer)


def save_hf_gemma(model, directory, tokenizer=None, overwrite=False):
    """Writes a Gemma-style `CausalLM` as a HuggingFace Gemma or Gemma 2
    checkpoint (Gemma 2 when it has `sandwich_norm`).

    config.json (with `query_pre_attn_scalar` = head_dim: the query scale is
    in the weights), model.safetensors (norms as weight = scale - 1),
    tokenizer.model and tokenizer_config.json. transformers'
    `AutoModelForCausalLM` and `load_hf_gemma` read it back.

    Args:
        model: a `CausalLM` with Gemma's options (see `load_hf_gemma`).
        directory: the folder to write (created, or empty).
        tokenizer: a `SentencePieceBPETokenizer`; by default the model's.
        overwrite: replace a `directory` that holds files, atomically.

    Returns:
        The checkpoint's folder, as a `pathlib.Path`.
    """
    tokenizer = model.tokenizer if tokenizer is None else tokenizer
    check_model_class(model, CausalLM)
    check_attributes(
        "Gemma", model, normalize_first=True, normalization="rms_norm",
        position_encoding="rotary", activation="geglu_approximate",
        scale_embeddings=True, use_bias=False, tie_word_embeddings=True,
        query_key_norm=False,
    )  # fmt: skip
    check_tokenizer_kind(
        tokenizer,
        isinstance(tokenizer, SentencePieceBPETokenizer),
        "a SentencePieceBPETokenizer (as load_hf_gemma attaches)",
    )
    check_vocabulary_size(tokenizer, model)
    attention = model.backbone.transformer_layers[0].self_attention
    config = flat_arguments(model)
    config["head_dim"] = head_dim = attention.effective_head_dim
    config["num_key_value_heads"] = attention.effective_num_key_value_heads
    gemma2 = model.sandwich_norm
    tensors = hf_gemma_tensors(model_weights(model), config)
    target = Path(directory)
    with atomic_directory(target, overwrite) as directory:

        def token_id(token):
            return None if token is None else int(tokenizer.token_to_id(token))

        hf_config = {
            "architectures": ["Gemma2ForCausalLM" if gemma2 else "GemmaForCausalLM"],
            "model_type": "gemma2" if gemma2 else "gemma",
            "vocab_size": model.vocabulary_size,
            "hidden_size": model.hidden_dim,
            "intermediate_size": model.intermediate_dim,
            "num_hidden_layers": model.num_layers,
            "num_attention_heads": model.num_heads,
            "num_key_value_heads": config["num_key_value_heads"],
            "head_dim": head_dim,
            "hidden_activation": GELU_TANH,
            "max_position_embeddings": model.max_sequence_length,
            "rms_norm_eps": model.layer_norm_epsilon,
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": model.rotary_max_wavelength,
            },
            "attention_bias": False,
            "attention_dropout": model.dropout,
            "tie_word_embeddings": True,
            "bos_token_id": token_id(tokenizer.bos_token),
            "eos_token_id": token_id(tokenizer.eos_token),
            "pad_token_id": token_id(tokenizer.pad_token),
        }
        if gemma2:
            hf_config.update(
                query_pre_attn_scalar=head_dim,
                attn_logit_softcapping=model.attention_logit_soft_cap,
                final_logit_softcapping=model.final_logit_soft_cap,
                # Our attention has no window: one as long as the model.
                sliding_window=model.max_sequence_length,
            )
        write_json(directory / "config.json", hf_config)
        write_safetensors(tensors, directory)
        (directory / "tokenizer.model").write_bytes(tokenizer.proto)
        settings = {
            "tokenizer_class": "GemmaTokenizer",
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

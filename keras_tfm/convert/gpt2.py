"""HuggingFace-format GPT-2 checkpoints <-> `keras_tfm.models.CausalLM`.

A checkpoint directory holds config.json (a `GPT2Config`), model.safetensors
(a `GPT2LMHeadModel`'s weights, names with or without the "transformer."
prefix) and the byte-level BPE tokenizer as vocab.json with merges.txt (or
tokenizer.json). GPT-2's `Conv1D` stores its weight as (in, out), as a Keras
kernel, so nothing is transposed; `c_attn` holds the query, key and value
projections side by side, and the key and value part is our fused
`key_value` projection as it is.
"""

import numpy as np

from keras_tfm.convert.config_checks import (
    check_attributes,
    check_format_settings,
    check_model_class,
    check_model_type,
    check_tokenizer_kind,
    check_vocabulary_size,
    config_choice,
    plain_attention_settings,
    refuse_unsupported_options,
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
    tokenizer_vocabulary,
    write_vocab_and_merges,
)
from keras_tfm.convert.weights import (
    built_with_weights,
    model_weights,
    refuse_unknown_tensors,
    require_tensors,
)
from keras_tfm.models.causal_lm import CausalLM
from keras_tfm.saving import atomic_directory
from keras_tfm.tokenizers.byte_level_bpe_tokenizer import ByteLevelBPETokenizer

# HuggingFace `activation_function` -> our FeedForward activation.
ACTIVATIONS = {
    "gelu_new": "gelu_approximate",
    "gelu_pytorch_tanh": "gelu_approximate",
    "gelu": "gelu",
    "relu": "relu",
}
END_OF_TEXT = "<|endoftext|>"
# Config keys whose non-default values GPT2LMHeadModel honours and we cannot.
UNSUPPORTED = {
    "scale_attn_weights": True,
    "scale_attn_by_inverse_layer_idx": False,
    "reorder_and_upcast_attn": False,
    "add_cross_attention": False,
}
# Buffers older checkpoints saved next to the weights (causal masks).
BUFFER_SUFFIXES = (".attn.bias", ".attn.masked_bias")


def convert_backbone_config(config, directory="."):
    """`CausalLM` arguments from a GPT-2 config.json dict."""
    check_model_type(config, ("gpt2",), "GPT-2", directory)
    activation = config_choice(
        config, "activation_function", ACTIVATIONS, "gelu_new", directory
    )
    refuse_unsupported_options(config, UNSUPPORTED, "GPT-2", directory)
    hidden = config["n_embd"]
    return dict(
        vocabulary_size=config["vocab_size"],
        num_layers=config["n_layer"],
        num_heads=config["n_head"],
        hidden_dim=hidden,
        intermediate_dim=config.get("n_inner") or 4 * hidden,
        max_sequence_length=config["n_positions"],
        activation=activation,
        dropout=config.get("resid_pdrop", 0.1),
        normalize_first=True,
        normalization="layer_norm",
        layer_norm_epsilon=config.get("layer_norm_epsilon", 1e-5),
        position_encoding="learned",
        use_bias=True,
        tie_word_embeddings=True,
        padding_id=config.get("pad_token_id"),
    )


def _hf_names(num_layers):
    """Our weight path -> GPT-2 name, for the weights mapped one to one."""
    names = {
        "token_embedding/embeddings": "wte.weight",
        "position_embedding/embeddings": "wpe.weight",
        "final_norm/gamma": "ln_f.weight",
        "final_norm/beta": "ln_f.bias",
    }
    for i in range(num_layers):
        ours, theirs = f"transformer_layer_{i}/", f"h.{i}."
        pairs = {
            "self_attention_norm/gamma": "ln_1.weight",
            "self_attention_norm/beta": "ln_1.bias",
            "feed_forward_norm/gamma": "ln_2.weight",
            "feed_forward_norm/beta": "ln_2.bias",
            "self_attention/attention_output/kernel": "attn.c_proj.weight",
            "self_attention/attention_output/bias": "attn.c_proj.bias",
            "feed_forward/intermediate/kernel": "mlp.c_fc.weight",
            "feed_forward/intermediate/bias": "mlp.c_fc.bias",
            "feed_forward/output/kernel": "mlp.c_proj.weight",
            "feed_forward/output/bias": "mlp.c_proj.bias",
        }
        names.update({ours + k: theirs + v for k, v in pairs.items()})
    return names


def _standardize_names(tensors):
    """Drops the "transformer." prefix, old mask buffers and a tied lm_head."""
    out = {}
    for name, value in tensors.items():
        if not name.endswith(BUFFER_SUFFIXES):
            out[name.removeprefix("transformer.")] = value
    head = out.pop("lm_head.weight", None)
    if head is not None and "wte.weight" in out:
        if not np.array_equal(head, out["wte.weight"]):
            raise ValueError(
                "lm_head.weight differs from wte.weight: GPT-2 ties them, and an "
                "untied GPT-2 head is not supported"
            )
    return out


def convert_weights(tensors, config, directory="."):
    """Our weight path -> array, from a GPT-2 checkpoint's tensors.

    Args:
        tensors: HuggingFace name -> array (with or without the
            "transformer." prefix; old mask buffers and a tied lm_head are
            dropped).
        config: the `CausalLM` arguments (`num_layers`, `hidden_dim`).
        directory: how errors name the checkpoint.

    Returns:
        A dict for every `CausalLM` weight path.
    """
    tensors = _standardize_names(tensors)
    num_layers, hidden_dim = config["num_layers"], config["hidden_dim"]
    names = _hf_names(num_layers)
    attention = [f"h.{i}.attn.c_attn.{leaf}" for i in range(num_layers)
                 for leaf in ("weight", "bias")]  # fmt: skip
    require_tensors(tensors, [*names.values(), *attention], "GPT-2", directory)
    refuse_unknown_tensors(tensors, [*names.values(), *attention], "GPT-2", directory)
    weights = {ours: tensors[theirs] for ours, theirs in names.items()}
    for i in range(num_layers):
        ours = f"transformer_layer_{i}/self_attention/"
        kernel = tensors[f"h.{i}.attn.c_attn.weight"]
        bias = tensors[f"h.{i}.attn.c_attn.bias"]
        if kernel.shape[-1] != 3 * hidden_dim or bias.shape != (3 * hidden_dim,):
            raise ValueError(
                f"h.{i}.attn.c_attn must project to 3 * n_embd = {3 * hidden_dim}. "
                f"Received: weight {kernel.shape}, bias {bias.shape}"
            )
        weights[ours + "query/kernel"] = kernel[:, :hidden_dim]
        weights[ours + "query/bias"] = bias[:hidden_dim]
        # Keys then values, as our fused key_value projection holds them.
        weights[ours + "key_value/kernel"] = kernel[:, hidden_dim:]
        weights[ours + "key_value/bias"] = bias[hidden_dim:]
    return weights


def convert_tokenizer(directory, config):
    """A `ByteLevelBPETokenizer` with GPT-2's pre-tokenization from the
    directory's tokenizer files, checked against config.json (`config`)."""
    vocabulary_size = config["vocab_size"]
    vocabulary, merges, special, options = read_vocab_and_merges(directory)
    if END_OF_TEXT not in vocabulary:
        raise ValueError(
            f"A GPT-2 vocabulary needs the {END_OF_TEXT!r} token. Received "
            f"{len(vocabulary)} tokens in {directory}"
        )
    if len(vocabulary) != vocabulary_size:
        raise ValueError(
            "The tokenizer and config.json disagree on the vocabulary size. "
            f"Received: {len(vocabulary)} tokens and vocab_size={vocabulary_size}"
        )
    # keras-hub's own split is Llama 3's regex; GPT-2's differs (e.g. on
    # runs of spaces), hence the tokenizer with GPT-2's pre-tokenization.
    return ByteLevelBPETokenizer(
        vocabulary=vocabulary,
        merges=merges,
        unsplittable_tokens=sorted({END_OF_TEXT, *special}),
        bos_token=END_OF_TEXT,
        eos_token=END_OF_TEXT,
        **options,
    )


def load_hf_gpt2(directory, max_sequence_length=None):
    """Loads a HuggingFace GPT-2 checkpoint as a `CausalLM` with its tokenizer.

    The model is pre-LN with learned positions, the checkpoint's sizes and
    layer-norm epsilon, GELU's tanh approximation (GPT-2's "gelu_new") and
    the head tied to the token embedding. GPT-2 has no padding token, so
    `padding_id` is the config's `pad_token_id`, usually None. The
    tokenizer is attached (`generate` then takes and returns strings): a
    `ByteLevelBPETokenizer`, keras-hub's byte-level `BytePairTokenizer` with
    the checkpoint's vocabulary and merges, GPT-2's pre-tokenization and
    "<|endoftext|>" as its start and end token.

    Args:
        directory: a folder with config.json, model.safetensors and vocab.json
            with merges.txt (or tokenizer.json).
        max_sequence_length: optional, at most the checkpoint's `n_positions`
            (a shorter position table is its first rows).

    Returns:
        A float32 `keras_tfm.models.CausalLM`.

    Example:
    >>> model = load_hf_gpt2(FIXTURES / "tiny_gpt2_hf")
    >>> model.num_layers, model.hidden_dim, model.activation, model.padding_id
    (2, 32, 'gelu_approximate', None)
    >>> model.tokenizer.id_to_token(model.tokenizer.end_token_id)
    '<|endoftext|>'
    """
    directory = check_directory(directory)
    hf_config = read_json(directory / "config.json")
    config = convert_backbone_config(hf_config, directory)
    weights = convert_weights(read_safetensors(directory), config, directory)
    if max_sequence_length is not None:
        if not 0 < max_sequence_length <= config["max_sequence_length"]:
            raise ValueError(
                "`max_sequence_length` must be in [1, n_positions="
                f"{config['max_sequence_length']}]. Received: "
                f"max_sequence_length={max_sequence_length}"
            )
        config["max_sequence_length"] = max_sequence_length
        table = weights["position_embedding/embeddings"]
        weights["position_embedding/embeddings"] = table[:max_sequence_length]
    tokenizer = convert_tokenizer(directory, hf_config)
    return built_with_weights(CausalLM, config, weights, tokenizer=tokenizer)


def _check_saveable(model, tokenizer):
    check_model_class(model, CausalLM)
    check_attributes(
        "GPT-2", model, normalize_first=True, normalization="layer_norm",
        position_encoding="learned", use_bias=True, tie_word_embeddings=True,
    )  # fmt: skip
    check_format_settings("GPT-2", plain_attention_settings(model.backbone))
    if model.activation not in ACTIVATIONS.values():
        raise ValueError(
            "A GPT-2 checkpoint needs activation 'gelu_approximate', 'gelu' or "
            f"'relu'. Received: activation={model.activation!r}"
        )
    check_tokenizer_kind(
        tokenizer,
        hasattr(tokenizer, "merges"),
        "a keras-hub byte-pair tokenizer (e.g. GPT2Tokenizer), or the model "
        "must have one attached",
    )
    check_vocabulary_size(tokenizer, model)
    if END_OF_TEXT not in tokenizer.vocabulary:
        raise ValueError(f"A GPT-2 vocabulary needs the {END_OF_TEXT!r} token.")
    if isinstance(tokenizer, ByteLevelBPETokenizer):
        # vocab.json and merges.txt hold no pre-tokenization: GPT-2's applies.
        settings = {
            "pre_tokenizer": ("gpt2", tokenizer.pre_tokenizer),
            "normalizer": (None, tokenizer.normalizer),
            "ignore_merges": (False, tokenizer.ignore_merges),
        }
        check_format_settings("GPT-2 tokenizer (vocab.json, merges.txt)", settings)


def save_hf_gpt2(model, directory, tokenizer=None, overwrite=False):
    """Writes a `CausalLM` and its tokenizer as a HuggingFace GPT-2 checkpoint.

    The folder gets config.json (a `GPT2LMHeadModel` config), model.safetensors
    (float32, "transformer."-prefixed names, the tied head not repeated),
    vocab.json, merges.txt, tokenizer_config.json and
    special_tokens_map.json. `load_hf_gpt2` and transformers'
    `AutoModelForCausalLM` / `AutoTokenizer` read it back.

    Args:
        model: a pre-LN `CausalLM` with layer norm, learned positions,
            biases, a tied head, plain multi-head attention and activation
            "gelu_approximate", "gelu" or "relu".
        directory: the folder to write (created, or empty).
        tokenizer: a keras-hub byte-level `BytePairTokenizer` (such as
            `GPT2Tokenizer` or `ByteLevelBPETokenizer`) with an
            "<|endoftext|>" token; by default the model's attached tokenizer.
        overwrite: replace a `directory` that holds files, atomically
            (`keras_tfm.saving.atomic_directory`).

    Returns:
        The GPT-2 checkpoint's folder, as a `pathlib.Path`.

    Example:
    >>> import tempfile
    >>> model = load_hf_gpt2(FIXTURES / "tiny_gpt2_hf")
    >>> folder = save_hf_gpt2(model, tempfile.mkdtemp())
    >>> sorted(path.name for path in folder.iterdir())  # doctest: +NORMALIZE_WHITESPACE
    ['config.json', 'merges.txt', 'model.safetensors', 'special_tokens_map.json',
     'tokenizer_config.json', 'vocab.json']
    """
    from pathlib import Path

    tokenizer = model.tokenizer if tokenizer is None else tokenizer
    _check_saveable(model, tokenizer)
    target = Path(directory)
    with atomic_directory(target, overwrite) as directory:
        vocabulary = tokenizer_vocabulary(tokenizer)
        end_id = vocabulary[END_OF_TEXT]
        inverse = {"gelu_approximate": "gelu_new", "gelu": "gelu", "relu": "relu"}
        config = {
            "architectures": ["GPT2LMHeadModel"],
            "model_type": "gpt2",
            "vocab_size": model.vocabulary_size,
            "n_positions": model.max_sequence_length,
            "n_embd": model.hidden_dim,
            "n_layer": model.num_layers,
            "n_head": model.num_heads,
            "n_inner": model.intermediate_dim,
            "activation_function": inverse[model.activation],
            "resid_pdrop": model.dropout,
            "embd_pdrop": model.dropout,
            "attn_pdrop": model.dropout,
            "layer_norm_epsilon": model.layer_norm_epsilon,
            "initializer_range": 0.02,
            "bos_token_id": end_id,
            "eos_token_id": end_id,
            "pad_token_id": model.padding_id,
            "tie_word_embeddings": True,
        }
        write_json(directory / "config.json", config)

        ours = model_weights(model)
        tensors = {
            f"transformer.{theirs}": ours[path]
            for path, theirs in _hf_names(model.num_layers).items()
        }
        for i in range(model.num_layers):
            p = f"transformer_layer_{i}/self_attention/"
            tensors[f"transformer.h.{i}.attn.c_attn.weight"] = np.concatenate(
                [ours[p + "query/kernel"], ours[p + "key_value/kernel"]], axis=1
            )
            tensors[f"transformer.h.{i}.attn.c_attn.bias"] = np.concatenate(
                [ours[p + "query/bias"], ours[p + "key_value/bias"]]
            )
        write_safetensors(tensors, directory)

        write_vocab_and_merges(directory, vocabulary, list(tokenizer.merges))
        special = {
            "bos_token": END_OF_TEXT,
            "eos_token": END_OF_TEXT,
            "unk_token": END_OF_TEXT,
        }
        write_json(
            directory / "tokenizer_config.json",
            {
                "tokenizer_class": "GPT2Tokenizer",
                "add_prefix_space": False,
                "model_max_length": model.max_sequence_length,
                **special,
            },
        )
        write_json(directory / "special_tokens_map.json", special)
    return target

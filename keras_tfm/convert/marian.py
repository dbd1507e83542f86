"""HuggingFace-format Marian (opus-mt) checkpoints -> `Seq2SeqLM`.

A checkpoint directory holds config.json (a `MarianConfig`), model.safetensors
(a `MarianMTModel`'s weights) and the tokenizer files source.spm, target.spm
and vocab.json. Marian is the post-LN Transformer of "Attention Is All You
Need" with biases everywhere, sinusoidal positions laid out [sin | cos] from
position 0, embeddings scaled by sqrt(d_model) when `scale_embedding`, one
embedding shared by the encoder, the decoder and (tied) the output
projection, and `final_logits_bias` added to the logits. torch's `Linear`
stores its weight as (out, in), so kernels are transposed; the key and value
projections are concatenated into our fused `key_value` projection.
"""

import numpy as np

from keras_tfm.convert.config_checks import (
    check_model_type,
    check_special_token_ids,
    config_choice,
    refuse_unsupported_options,
)
from keras_tfm.convert.hf_directory import (
    check_directory,
    read_json,
    read_safetensors,
)
from keras_tfm.convert.weights import (
    assign_weights,
    refuse_unknown_tensors,
    require_tensors,
)
from keras_tfm.layers.positional_encoding import PositionalEncoding
from keras_tfm.models.seq2seq_lm import Seq2SeqLM
from keras_tfm.tokenizers.marian_tokenizer import MarianTokenizer

# HuggingFace `activation_function` -> our FeedForward activation.
ACTIVATIONS = {
    "swish": "silu",
    "silu": "silu",
    "gelu": "gelu",
    "gelu_new": "gelu_approximate",
    "gelu_pytorch_tanh": "gelu_approximate",
    "relu": "relu",
}
# Config keys (some from older Marian/BART configs) whose other values
# change the computation in ways our model does not have.
UNSUPPORTED = {
    "share_encoder_decoder_embeddings": True,
    "normalize_before": False,
    "normalize_embedding": False,
    "add_final_layer_norm": False,
    "static_position_embeddings": True,
    "add_bias_logits": False,
    "scale_attention": True,
}
# Pairs of keys that our model has one value for, encoder and decoder alike.
SAME = (
    ("encoder_attention_heads", "decoder_attention_heads"),
    ("encoder_ffn_dim", "decoder_ffn_dim"),
    ("vocab_size", "decoder_vocab_size"),
)
PREFIX = "model."


def convert_backbone_config(config, directory="."):
    """`Seq2SeqLM` arguments from a Marian config.json dict."""
    where = f"{directory}/config.json"
    check_model_type(config, ("marian",), "Marian", directory)
    activation = config_choice(
        config, "activation_function", ACTIVATIONS, "gelu", directory
    )
    refuse_unsupported_options(config, UNSUPPORTED, "Marian", directory)
    for encoder_key, decoder_key in SAME:
        encoder, decoder = config[encoder_key], config.get(decoder_key)
        if decoder is not None and decoder != encoder:
            raise ValueError(
                f"The encoder and the decoder must agree: {encoder_key}="
                f"{encoder!r} but {decoder_key}={decoder!r} in {where}"
            )
    pad = config.get("pad_token_id")
    if pad is None:
        raise ValueError(
            f"A Marian config needs `pad_token_id`. Received none in {where}"
        )
    return dict(
        vocabulary_size=config["vocab_size"],
        num_encoder_layers=config["encoder_layers"],
        num_decoder_layers=config["decoder_layers"],
        num_heads=config["encoder_attention_heads"],
        hidden_dim=config["d_model"],
        intermediate_dim=config["encoder_ffn_dim"],
        max_sequence_length=config["max_position_embeddings"],
        activation=activation,
        dropout=config.get("dropout", 0.1),
        normalize_first=False,
        normalization="layer_norm",
        layer_norm_epsilon=1e-5,  # torch's LayerNorm default, which Marian uses
        position_encoding="sinusoidal_split",
        use_bias=True,
        tie_word_embeddings=config.get("tie_word_embeddings", True),
        scale_embeddings=bool(config.get("scale_embedding", False)),
        use_logits_bias=True,
        padding_id=pad,
    )


def _layer_names(prefix, ours, cross):
    """Our weight path -> HF name for one block's one-to-one weights."""
    pairs = {
        "self_attention/query": "self_attn.q_proj",
        "self_attention/attention_output": "self_attn.out_proj",
        "feed_forward/intermediate": "fc1",
        "feed_forward/output": "fc2",
    }
    norms = {
        "self_attention_norm": "self_attn_layer_norm",
        "feed_forward_norm": "final_layer_norm",
    }
    if cross:
        pairs["cross_attention/query"] = "encoder_attn.q_proj"
        pairs["cross_attention/attention_output"] = "encoder_attn.out_proj"
        norms["cross_attention_norm"] = "encoder_attn_layer_norm"
    names = {}
    for a, b in pairs.items():
        names[f"{ours}{a}/kernel"] = f"{prefix}{b}.weight"
        names[f"{ours}{a}/bias"] = f"{prefix}{b}.bias"
    for a, b in norms.items():
        names[f"{ours}{a}/gamma"] = f"{prefix}{b}.weight"
        names[f"{ours}{a}/beta"] = f"{prefix}{b}.bias"
    return names


def _standardize_names(tensors):
    """Drops the "model." prefix of `MarianMTModel` names."""
    return {name.removeprefix(PREFIX): value for name, value in tensors.items()}


def _check_copies(tensors, embedding, tied, directory):
    """Tied copies of the shared embedding must equal it; positions the formula."""
    copies = ["encoder.embed_tokens.weight", "decoder.embed_tokens.weight"]
    if tied:
        copies.append("lm_head.weight")
    for name in copies:
        if name in tensors and not np.array_equal(tensors[name], embedding):
            raise ValueError(
                f"{name} differs from shared.weight in {directory}: separate "
                "encoder, decoder or (tied) output embeddings are not supported"
            )
    for name in ("encoder.embed_positions.weight", "decoder.embed_positions.weight"):
        if name in tensors:
            table = tensors[name]
            formula = PositionalEncoding(interleave=False).encoding(
                np.zeros((1, table.shape[0], table.shape[1]), "float32")
            )
            if not np.allclose(table, np.asarray(formula), atol=1e-4):
                raise ValueError(
                    f"{name} in {directory} is not Marian's sinusoidal table: "
                    "learned positions are not supported"
                )


def _weight_names(config):
    """`(names, key_value)`: our path -> HF name for the one-to-one weights,
    and our fused key_value path -> its (k name, v name)."""
    names = {}
    kv = {}
    stacks = (
        ("encoder", config["num_encoder_layers"], False),
        ("decoder", config["num_decoder_layers"], True),
    )
    for stack, count, cross in stacks:
        for i in range(count):
            prefix, ours = f"{stack}.layers.{i}.", f"{stack}_transformer_layer_{i}/"
            names.update(_layer_names(prefix, ours, cross))
            for attention, theirs in (("self_attention", "self_attn"),
                                      ("cross_attention", "encoder_attn")):  # fmt: skip
                if attention == "cross_attention" and not cross:
                    continue
                for leaf in ("weight", "bias"):
                    key = f"{ours}{attention}/key_value/" + (
                        "kernel" if leaf == "weight" else "bias"
                    )
                    kv[key] = tuple(
                        f"{prefix}{theirs}.{p}_proj.{leaf}" for p in ("k", "v")
                    )
    return names, kv


def weight_sources(config):
    """Our weight path -> the checkpoint tensor(s) it comes from, for errors."""
    names, kv = _weight_names(config)
    sources = {**names, **{path: " and ".join(pair) for path, pair in kv.items()}}
    sources["token_embedding/embeddings"] = "shared.weight"
    sources["lm_head/kernel"] = "lm_head.weight"
    return sources


def convert_weights(tensors, config, directory="."):
    """Our weight path -> array, from a Marian checkpoint's tensors.

    Args:
        tensors: HuggingFace name -> array (with or without `MarianMTModel`'s
            "model." prefix).
        config: the `Seq2SeqLM` arguments.
        directory: how errors name the checkpoint.

    Returns:
        A dict for every `Seq2SeqLM` weight path (kernels (in, out)).
    """
    tensors = _standardize_names(tensors)
    names, kv = _weight_names(config)
    if "shared.weight" not in tensors and "encoder.embed_tokens.weight" in tensors:
        tensors = {**tensors, "shared.weight": tensors["encoder.embed_tokens.weight"]}
    required = ["shared.weight", *names.values()]
    required += [name for pair in kv.values() for name in pair]
    tied = config["tie_word_embeddings"]
    if not tied:
        required.append("lm_head.weight")
    require_tensors(tensors, required, "Marian", directory)
    optional = [
        "final_logits_bias",
        "lm_head.weight",
        "encoder.embed_tokens.weight",
        "decoder.embed_tokens.weight",
        "encoder.embed_positions.weight",
        "decoder.embed_positions.weight",
    ]
    refuse_unknown_tensors(tensors, [*required, *optional], "Marian", directory)
    embedding = tensors["shared.weight"]
    _check_copies(tensors, embedding, tied, directory)

    def ours(path, theirs):
        value = tensors[theirs]
        # torch Linear weights are (out, in); Keras kernels (in, out).
        return value.T if path.endswith("/kernel") else value

    weights = {path: ours(path, theirs) for path, theirs in names.items()}
    for path, (k, v) in kv.items():
        weights[path] = np.concatenate([ours(path, k), ours(path, v)], axis=-1)
    weights["token_embedding/embeddings"] = embedding
    if not tied:
        weights["lm_head/kernel"] = tensors["lm_head.weight"].T
    vocabulary = config["vocabulary_size"]
    bias = tensors.get("final_logits_bias", np.zeros((1, vocabulary), "float32"))
    if bias.shape != (1, vocabulary):
        raise ValueError(
            f"final_logits_bias must have shape (1, vocab_size={vocabulary}). "
            f"Received: {bias.shape} in {directory}"
        )
    weights["logits_bias/bias"] = bias[0]
    return weights


def _check_shapes(model, weights, sources):
    """Raises naming the checkpoint's tensor whose shape does not fit."""
    for variable in model.weights:
        value = weights.get(variable.path)
        if value is not None and tuple(value.shape) != tuple(variable.shape):
            theirs = sources.get(variable.path, variable.path)
            raise ValueError(
                f"The checkpoint's {theirs} does not fit the config: it gives "
                f"{variable.path} shape {tuple(value.shape)}, the config "
                f"{tuple(variable.shape)}"
            )


def convert_tokenizer(directory, config):
    """A `MarianTokenizer` from source.spm, target.spm and vocab.json, checked
    against config.json (`config`): vocabulary size, pad, end and decoder
    start ids."""
    where = f"{directory}/config.json"
    files = [directory / name for name in ("source.spm", "target.spm", "vocab.json")]
    missing = [path.name for path in files if not path.exists()]
    if missing:
        raise ValueError(
            f"A Marian checkpoint needs source.spm, target.spm and vocab.json. "
            f"Received a directory without {missing}: {directory}"
        )
    tokenizer_config = read_json(directory / "tokenizer_config.json", required=False)
    if tokenizer_config.get("separate_vocabs"):
        raise ValueError(
            "Separate source and target vocabularies (separate_vocabs=True) are "
            f"not supported. Received in {directory}/tokenizer_config.json"
        )
    tokenizer = MarianTokenizer(
        proto=str(files[0]),
        target_proto=str(files[1]),
        vocabulary=str(files[2]),
        unk_token=tokenizer_config.get("unk_token", "<unk>"),
        eos_token=tokenizer_config.get("eos_token", "</s>"),
        pad_token=tokenizer_config.get("pad_token", "<pad>"),
    )
    size = tokenizer.vocabulary_size()
    if size != config["vocab_size"]:
        raise ValueError(
            "vocab.json and config.json disagree on the vocabulary size. "
            f"Received: {size} pieces and vocab_size={config['vocab_size']} in {where}"
        )
    check_special_token_ids(
        config,
        {
            "pad_token_id": tokenizer.pad_token_id,
            "eos_token_id": tokenizer.end_token_id,
            "decoder_start_token_id": tokenizer.start_token_id,
        },
        'Marian\'s pad, end and decoder start tokens are "<pad>", "</s>" and "<pad>"',
        where,
    )
    return tokenizer


def load_hf_marian(directory):
    """Loads a HuggingFace Marian (opus-mt) checkpoint as a `Seq2SeqLM`.

    The model is post-LN with the checkpoint's sizes, `position_encoding=
    "sinusoidal_split"` (Marian's [sin | cos] table, from position 0),
    embeddings scaled by sqrt(d_model) when the config's `scale_embedding`,
    the activation of `activation_function` ("swish" is "silu"), one
    embedding shared by encoder and decoder, the output projection tied to
    it (or a separate `lm_head` when `tie_word_embeddings` is false) and
    `final_logits_bias` as the logits bias. `padding_id` is the pad id, which
    is also Marian's decoder start token. The attached `MarianTokenizer`
    reads source.spm, target.spm and vocab.json; `generate` then takes
    source texts and returns translations, starting from the pad token and
    stopping at "</s>". Generation options of generation_config.json (beam
    width, `bad_words_ids`, forced end token) are not read.

    Args:
        directory: a folder with config.json, model.safetensors, source.spm,
            target.spm and vocab.json (tokenizer_config.json optional).

    Returns:
        A float32 `keras_tfm.models.Seq2SeqLM`.

    Example:
    >>> model = load_hf_marian(FIXTURES / "tiny_marian_hf")
    >>> model.num_encoder_layers, model.hidden_dim, model.activation
    (2, 32, 'silu')
    >>> model.position_encoding, model.padding_id == model.tokenizer.start_token_id
    ('sinusoidal_split', True)
    """
    directory = check_directory(directory)
    hf_config = read_json(directory / "config.json")
    config = convert_backbone_config(hf_config, directory)
    tensors = read_safetensors(directory, "AutoModelForSeq2SeqLM")
    weights = convert_weights(tensors, config, directory)
    tokenizer = convert_tokenizer(directory, hf_config)
    model = Seq2SeqLM.from_config(
        {**config, "tokenizer": tokenizer, "dtype": "float32"}
    )
    _check_shapes(model, weights, weight_sources(config))
    assign_weights(model, weights)
    return model

"""HuggingFace-format T5 checkpoints <-> `Seq2SeqLM`.

A checkpoint directory holds config.json (a `T5Config`), the weights of a
`T5ForConditionalGeneration` (model.safetensors or shards) and the tokenizer
(spiece.model and/or tokenizer.json). T5 is pre-norm with RMS norms without
bias (`normalization="rms_norm"`), no biases anywhere, no absolute
positions but a bucketed relative position bias on the self-attention
logits (`position_encoding="relative"`, one table per stack: transformers
keeps it in the first block), attention logits not scaled by 1/sqrt(d)
(`scale_attention=False`), a "relu" feed-forward (T5) or "gated-gelu"
(T5 v1.1, FLAN-T5: `activation="geglu_approximate"`, wi_0 the gate), and a
head that is the shared embedding with the decoder output scaled by
d_model ** -0.5 (T5) or a separate `lm_head` without scaling (v1.1).
torch's `Linear` stores its weight as (out, in), so kernels are transposed;
k and v are concatenated into our fused `key_value` projection, wi_0 and
wi_1 into our fused gated `intermediate` projection.
"""

from pathlib import Path

import numpy as np

from keras_tfm.convert.config_checks import (
    check_model_class,
    check_model_type,
    check_special_token_ids,
    check_tokenizer_kind,
    config_choice,
)
from keras_tfm.convert.hf_directory import (
    check_directory,
    read_json,
    read_safetensors,
    write_json,
    write_safetensors,
)
from keras_tfm.convert.weights import (
    built_with_weights,
    model_weights,
    refuse_unknown_tensors,
    require_tensors,
)
from keras_tfm.models.seq2seq_lm import Seq2SeqLM
from keras_tfm.saving import atomic_directory
from keras_tfm.tokenizers.t5_tokenizer import (
    T5Tokenizer,
    plain_spiece_proto,
    spiece_proto,
    unigram_proto,
)

# HuggingFace `feed_forward_proj` -> our FeedForward activation.
ACTIVATIONS = {
    "relu": "relu",
    "gated-gelu": "geglu_approximate",
    "gated-silu": "swiglu",
}
GATED = ("geglu_approximate", "swiglu")
DEFAULT_LENGTH = 512  # T5 has no position table; its tokenizers stop at 512


def convert_backbone_config(config, directory="."):
    """`Seq2SeqLM` arguments (backbone's and task's) from a T5 config.json dict.

    The head is tied unless `tie_word_embeddings` is false; the decoder output
    is scaled by d_model ** -0.5 when `scale_decoder_outputs` (transformers 5)
    says so, else when the head is tied (transformers 4's rule).
    """
    check_model_type(config, ("t5",), "T5", directory)
    activation = config_choice(
        config, "feed_forward_proj", ACTIVATIONS, "relu", directory
    )
    pad = config.get("pad_token_id", 0)
    # T5 has one `dropout_rate`, at every place its dropout is.
    dropout = config.get("dropout_rate", 0.1)
    tied = config.get("tie_word_embeddings", True) is not False
    return dict(
        vocabulary_size=config["vocab_size"],
        num_encoder_layers=config["num_layers"],
        num_decoder_layers=config.get("num_decoder_layers") or config["num_layers"],
        num_heads=config["num_heads"],
        hidden_dim=config["d_model"],
        intermediate_dim=config["d_ff"],
        head_dim=config["d_kv"],
        max_sequence_length=config.get("n_positions", DEFAULT_LENGTH),
        activation=activation,
        dropout=dropout,
        inner_dropout=dropout,
        final_dropout=dropout,
        normalize_first=True,
        normalization="rms_norm",
        layer_norm_epsilon=config.get("layer_norm_epsilon", 1e-6),
        position_encoding="relative",
        use_bias=False,
        scale_embeddings=False,
        scale_attention=False,
        relative_attention_num_buckets=config.get("relative_attention_num_buckets", 32),
        relative_attention_max_distance=config.get(
            "relative_attention_max_distance", 128
        ),
        padding_id=pad,
        tie_word_embeddings=tied,
        scale_decoder_outputs=bool(config.get("scale_decoder_outputs", tied)),
        start_token_id=config.get("decoder_start_token_id", pad),
    )


def _attention_names(ours, theirs):
    """Our attention + norm weight paths -> HF names (k, v as a pair)."""
    return {
        f"{ours}/query/kernel": f"{theirs}.q.weight",
        f"{ours}/key_value/kernel": (f"{theirs}.k.weight", f"{theirs}.v.weight"),
        f"{ours}/attention_output/kernel": f"{theirs}.o.weight",
    }


def weight_names(config):
    """Our weight path -> its HF name, or a pair of names that are concatenated.

    Kernels (our ".../kernel") are the transposes of HF's `Linear` weights.
    """
    gated = config["activation"] in GATED
    names = {
        "token_embedding/embeddings": "shared.weight",
        "encoder_final_norm/scale": "encoder.final_layer_norm.weight",
        "decoder_final_norm/scale": "decoder.final_layer_norm.weight",
    }
    stacks = (
        ("encoder", config["num_encoder_layers"], False),
        ("decoder", config["num_decoder_layers"], True),
    )
    for stack, count, cross in stacks:
        bias = f"{stack}.block.0.layer.0.SelfAttention.relative_attention_bias.weight"
        names[f"{stack}_relative_position_bias/embeddings"] = bias
        for i in range(count):
            ours, theirs = (
                f"{stack}_transformer_layer_{i}/",
                f"{stack}.block.{i}.layer.",
            )
            ffn = f"{theirs}{2 if cross else 1}."
            names.update(
                _attention_names(f"{ours}self_attention", f"{theirs}0.SelfAttention")
            )
            names[f"{ours}self_attention_norm/scale"] = f"{theirs}0.layer_norm.weight"
            if cross:
                names.update(
                    _attention_names(
                        f"{ours}cross_attention", f"{theirs}1.EncDecAttention"
                    )
                )
                names[f"{ours}cross_attention_norm/scale"] = (
                    f"{theirs}1.layer_norm.weight"
                )
            names[f"{ours}feed_forward/intermediate/kernel"] = (
                (f"{ffn}DenseReluDense.wi_0.weight", f"{ffn}DenseReluDense.wi_1.weight")
                if gated
                else f"{ffn}DenseReluDense.wi.weight"
            )
            names[f"{ours}feed_forward/output/kernel"] = (
                f"{ffn}DenseReluDense.wo.weight"
            )
            names[f"{ours}feed_forward_norm/scale"] = f"{ffn}layer_norm.weight"
    if not config["tie_word_embeddings"]:
        names["lm_head/kernel"] = "lm_head.weight"
    return names


def head_is_tied(config, tensors):
    """Whether the checkpoint's head is its shared embedding.

    transformers 5 writes `tie_word_embeddings: true` for every T5 and keeps a
    separate head when the file has an `lm_head.weight` that differs from
    `shared.weight`; so do we.
    """
    head = tensors.get("lm_head.weight")
    if head is None:
        return True
    shared = tensors.get("shared.weight")
    return shared is not None and np.array_equal(head, shared)


def convert_weights(tensors, config, directory="."):
    """Our weight path -> array, from a `T5ForConditionalGeneration`'s tensors.

    Args:
        tensors: HuggingFace name -> array.
        config: the `Seq2SeqLM` arguments (`convert_backbone_config`, with
            `tie_word_embeddings` as `head_is_tied` finds it).
        directory: how errors name the checkpoint.

    Returns:
        A dict for every `Seq2SeqLM` weight path (kernels (in, out)).
    """
    tensors = dict(tensors)
    if "shared.weight" not in tensors and "encoder.embed_tokens.weight" in tensors:
        tensors["shared.weight"] = tensors["encoder.embed_tokens.weight"]
    names = weight_names(config)
    required = [
        n
        for name in names.values()
        for n in (name if isinstance(name, tuple) else (name,))
    ]
    require_tensors(tensors, required, "T5", directory)
    copies = ["encoder.embed_tokens.weight", "decoder.embed_tokens.weight"]
    if config["tie_word_embeddings"]:
        copies.append("lm_head.weight")
    refuse_unknown_tensors(tensors, [*required, *copies], "T5", directory)
    for name in copies:
        if name in tensors and not np.array_equal(
            tensors[name], tensors["shared.weight"]
        ):
            raise ValueError(
                f"{name} differs from shared.weight in {directory}: separate "
                "encoder or decoder embeddings are not supported"
            )

    def ours(path, theirs):
        value = tensors[theirs]
        return value.T if path.endswith("/kernel") else value

    weights = {}
    for path, theirs in names.items():
        if isinstance(theirs, tuple):
            weights[path] = np.concatenate([ours(path, t) for t in theirs], axis=-1)
        else:
            weights[path] = ours(path, theirs)
    return weights


def hf_t5_tensors(weights, config):
    """The inverse of `convert_weights`: `T5ForConditionalGeneration` name -> array."""
    tensors = {}
    for path, theirs in weight_names(config).items():
        value = weights[path]
        if isinstance(theirs, tuple):
            for name, part in zip(theirs, np.split(value, 2, axis=-1), strict=True):
                tensors[name] = part.T
        else:
            tensors[theirs] = value.T if path.endswith("/kernel") else value
    return tensors


def _extra_ids(tokenizer_config):
    """The number of sentinels: tokenizer_config.json's `extra_ids`, else those
    listed among its special tokens, else T5's 100."""
    if "extra_ids" in tokenizer_config:
        return int(tokenizer_config["extra_ids"])
    listed = [
        *tokenizer_config.get("additional_special_tokens", []),
        *tokenizer_config.get("extra_special_tokens", []),
    ]
    sentinels = [t for t in listed if isinstance(t, str) and t.startswith("<extra_id_")]
    return len(sentinels) if listed else 100


def convert_tokenizer(directory, config):
    """A `T5Tokenizer` from spiece.model (with tokenizer_config.json's
    sentinels) or, without it, tokenizer.json; checked against config.json's
    pad, end and vocabulary size."""
    directory = Path(directory)
    spiece, tokenizer_json = directory / "spiece.model", directory / "tokenizer.json"
    if spiece.exists():
        tokenizer_config = read_json(
            directory / "tokenizer_config.json", required=False
        )
        proto = spiece_proto(spiece, _extra_ids(tokenizer_config))
    elif tokenizer_json.exists():
        proto = unigram_proto(tokenizer_json)
    else:
        raise ValueError(
            "A T5 checkpoint needs spiece.model or tokenizer.json. Received a "
            f"directory without either: {directory}"
        )
    tokenizer = T5Tokenizer(proto)
    where = f"{directory}/config.json"
    size = tokenizer.vocabulary_size()
    if size > config["vocab_size"]:
        raise ValueError(
            f"The tokenizer has more tokens ({size}) than the model's "
            f"vocab_size={config['vocab_size']} in {where}"
        )
    check_special_token_ids(
        config,
        {
            "pad_token_id": tokenizer.pad_token_id,
            "eos_token_id": tokenizer.end_token_id,
        },
        '"<pad>" and "</s>"',
        where,
    )
    return tokenizer


def load_hf_t5(directory):
    """Loads a HuggingFace T5, T5 v1.1 or FLAN-T5 checkpoint as a `Seq2SeqLM`.

    The model has the checkpoint's sizes (`head_dim` is its `d_kv`),
    pre-norm RMS norms, no biases, T5's relative position bias, unscaled
    attention, the activation of `feed_forward_proj` ("relu", "gated-gelu"
    or "gated-silu"), the head tied (with the decoder output scaled by
    d_model ** -0.5) or separate, and starts decoding from
    `decoder_start_token_id` ("<pad>"). The attached `T5Tokenizer` reads
    spiece.model (or tokenizer.json) and appends "</s>"; `generate` then
    takes texts ("translate English to German: ...") and returns texts,
    stopping at "</s>". `max_sequence_length` is the config's `n_positions`
    (512 if absent): relative positions have no table, so it only bounds the
    inputs. Dropout (training only) is the config's `dropout_rate` where
    T5 has it: the embeddings, the attention weights, the sublayer outputs,
    inside the feed-forward (after the activation) and after each stack's
    final norm. mT5 (`model_type` "mt5") and other families are refused.

    Use float32 or bfloat16: T5's activations overflow float16.

    Args:
        directory: a folder with config.json, model.safetensors (or shards
            with model.safetensors.index.json) and spiece.model or
            tokenizer.json (tokenizer_config.json optional).

    Returns:
        A float32 `keras_tfm.models.Seq2SeqLM` with its preprocessor.

    Example:
    >>> model = load_hf_t5(FIXTURES / "tiny_t5_v1_1_hf")
    >>> model.activation, model.position_encoding, model.tie_word_embeddings
    ('geglu_approximate', 'relative', False)
    >>> len(model.generate(["translate English to German: Hello."],
    ...                    max_new_tokens=4)) == 1
    True
    """
    directory = check_directory(directory)
    hf_config = read_json(directory / "config.json")
    config = convert_backbone_config(hf_config, directory)
    tensors = read_safetensors(directory, "AutoModelForSeq2SeqLM")
    config["tie_word_embeddings"] = head_is_tied(config, tensors)
    if not config["tie_word_embeddings"]:
        config["scale_decoder_outputs"] = bool(
            hf_config.get("scale_decoder_outputs", False)
        )
    weights = convert_weights(tensors, config, directory)
    del tensors
    tokenizer = convert_tokenizer(directory, hf_config)
    return built_with_weights(Seq2SeqLM, config, weights, tokenizer=tokenizer)


def _check_saveable(model):
    check_model_class(model, Seq2SeqLM)
    backbone = model.backbone
    wanted = dict(
        position_encoding="relative", normalize_first=True, normalization="rms_norm",
        use_bias=False, scale_embeddings=False, scale_attention=False,
    )  # fmt: skip
    for name, value in wanted.items():
        if getattr(backbone, name) != value:
            raise ValueError(
                f"A T5 checkpoint needs {name}={value!r}. Received: "
                f"{name}={getattr(backbone, name)!r}"
            )
    if backbone.activation not in ACTIVATIONS.values():
        raise ValueError(
            f"A T5 checkpoint needs activation in {sorted(set(ACTIVATIONS.values()))}. "
            f"Received: activation={backbone.activation!r}"
        )
    if model.use_logits_bias:
        raise ValueError(
            "A T5 checkpoint has no logits bias. Received: use_logits_bias=True"
        )
    if backbone.num_key_value_heads not in (None, backbone.num_heads):
        raise ValueError(
            "A T5 checkpoint has as many key/value heads as heads. Received: "
            f"num_key_value_heads={backbone.num_key_value_heads}"
        )
    tokenizer = getattr(model.preprocessor, "tokenizer", None)
    if tokenizer is not None:
        check_tokenizer_kind(
            tokenizer, isinstance(tokenizer, T5Tokenizer), "a T5Tokenizer"
        )


def save_hf_t5(model, directory, overwrite=False):
    """Writes a T5-shaped `Seq2SeqLM` as a HuggingFace T5 checkpoint.

    The folder gets config.json (a `T5Config`; `tie_word_embeddings` and
    `scale_decoder_outputs` as the model has them), model.safetensors
    (float32, `T5ForConditionalGeneration` names; `lm_head.weight` only for
    a separate head) and, with a `T5Tokenizer`, spiece.model and
    tokenizer_config.json. `load_hf_t5` and transformers'
    `T5ForConditionalGeneration` / `AutoTokenizer` read it back.

    Args:
        model: a `Seq2SeqLM` with T5's settings (e.g. from `load_hf_t5`).
        directory: the folder to write (created, or empty).
        overwrite: replace a `directory` that holds files, atomically.

    Returns:
        The checkpoint's folder, as a `pathlib.Path`.

    Example:
    >>> import tempfile
    >>> model = load_hf_t5(FIXTURES / "tiny_t5_hf")
    >>> folder = save_hf_t5(model, tempfile.mkdtemp())
    >>> sorted(path.name for path in folder.iterdir())
    ['config.json', 'model.safetensors', 'spiece.model', 'tokenizer_config.json']
    """
    _check_saveable(model)
    backbone = model.backbone
    inverse = {v: k for k, v in ACTIVATIONS.items()}
    target = Path(directory)
    with atomic_directory(target, overwrite) as directory:
        pad = backbone.fill_id
        attention = backbone.encoder_transformer_layers[0].self_attention
        config = {
            "architectures": ["T5ForConditionalGeneration"],
            "model_type": "t5",
            "vocab_size": backbone.vocabulary_size,
            "d_model": backbone.hidden_dim,
            "d_kv": attention.effective_head_dim,
            "d_ff": backbone.intermediate_dim,
            "num_layers": backbone.num_encoder_layers,
            "num_decoder_layers": backbone.num_decoder_layers,
            "num_heads": backbone.num_heads,
            "relative_attention_num_buckets": backbone.relative_attention_num_buckets,
            "relative_attention_max_distance": backbone.relative_attention_max_distance,
            "dropout_rate": backbone.dropout,
            "layer_norm_epsilon": backbone.layer_norm_epsilon,
            "feed_forward_proj": inverse[backbone.activation],
            "is_encoder_decoder": True,
            "tie_word_embeddings": model.tie_word_embeddings,
            "scale_decoder_outputs": model.scale_decoder_outputs,
            "n_positions": backbone.max_sequence_length,
            "pad_token_id": pad,
            "eos_token_id": 1,
            "decoder_start_token_id": model.decoder_start_id(),
        }
        tokenizer = getattr(model.preprocessor, "tokenizer", None)
        if tokenizer is not None:
            config["eos_token_id"] = tokenizer.end_token_id
        write_json(directory / "config.json", config)
        arguments = dict(
            num_encoder_layers=backbone.num_encoder_layers,
            num_decoder_layers=backbone.num_decoder_layers,
            activation=backbone.activation,
            tie_word_embeddings=model.tie_word_embeddings,
        )
        write_safetensors(hf_t5_tensors(model_weights(model), arguments), directory)
        if tokenizer is not None:
            proto, extra_ids = plain_spiece_proto(tokenizer.proto)
            (directory / "spiece.model").write_bytes(proto)
            write_json(
                directory / "tokenizer_config.json",
                {
                    "tokenizer_class": "T5Tokenizer",
                    "extra_ids": extra_ids,
                    "eos_token": "</s>",
                    "pad_token": "<pad>",
                    "unk_token": "<unk>",
                    "model_max_length": backbone.max_sequence_length,
                },
            )
    return target

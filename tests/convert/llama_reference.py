"""A float64 NumPy Llama forward pass over a GGUF file's tensors as stored.

Written from the Llama formulas, independently of keras_tfm: RMSNorm
x / sqrt(mean(x^2) + eps) * w, pre-norm residual blocks, grouped-query
causal attention (query head h reads key/value head h // (heads /
kv_heads)), SwiGLU (silu(x Wg) * (x Wu)) Wd, and the embedding as the head.
RoPE is applied as ggml does for Llama, to adjacent pairs (2i, 2i + 1) of
the query and key rows *as the GGUF file stores them*, so this reference
needs no un-permutation: that keras_tfm's un-permuted, half-split version
gives the same logits checks the row order. Qwen2 and Qwen3 files
(`rope="half_split"`: ggml's NEOX RoPE, pairs (i, i + d / 2), rows as
HuggingFace has them) add what their tensors hold: q/k/v biases
(`attn_q.bias`, ...) and each head's query/key RMSNorm before the rotation
(`attn_q_norm.weight`, `attn_k_norm.weight`). Phi-3 files (NEOX RoPE too)
fuse the projections as llama.cpp's phi3 graph reads them: `attn_qkv`'s
rows are all query heads, then key heads, then value heads, and `ffn_up`
without an `ffn_gate` holds the gate rows, then the up rows (ggml's SwiGLU
applies silu to the first half).
"""

import numpy as np
from gguf.quants import dequantize


def tensors_of(reader):
    """Name -> float32 array in (out, in) layout, as `gguf` dequantises it."""
    return {
        t.name: np.asarray(dequantize(t.data, t.tensor_type), "float32").reshape(
            tuple(int(d) for d in reversed(t.shape))
        )
        for t in reader.tensors
    }


def rms_norm(x, weight, epsilon):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + epsilon) * weight


def rope_adjacent_pairs(x, base):
    """x: (seq, heads, d); rotates (x[2i], x[2i+1]) by pos * base^(-2i/d)."""
    seq, _, dim = x.shape
    angles = np.arange(seq)[:, None] * base ** (-np.arange(0, dim, 2) / dim)
    cos, sin = np.cos(angles)[:, None, :], np.sin(angles)[:, None, :]
    even, odd = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = even * cos - odd * sin
    out[..., 1::2] = even * sin + odd * cos
    return out


def rope_half_split(x, base):
    """x: (seq, heads, d); rotates (x[i], x[i + d/2]) by pos * base^(-2i/d)."""
    seq, _, dim = x.shape
    angles = np.arange(seq)[:, None] * base ** (-np.arange(0, dim, 2) / dim)
    cos, sin = np.cos(angles)[:, None, :], np.sin(angles)[:, None, :]
    first, second = x[..., : dim // 2], x[..., dim // 2 :]
    return np.concatenate([first * cos - second * sin, first * sin + second * cos], -1)


def llama_logits(
    tensors, token_ids, num_heads, num_kv_heads, epsilon, base, rope="adjacent"
):
    """float64 logits (seq, vocabulary) for one sequence of ids."""
    rotate = rope_adjacent_pairs if rope == "adjacent" else rope_half_split

    def w(name):
        return tensors[name].astype("float64")

    def project(x, name):  # x W^T (+ b where the file has a bias)
        out = x @ w(name + ".weight").T
        return out + w(name + ".bias") if name + ".bias" in tensors else out

    embedding = w("token_embd.weight")
    h = embedding[np.asarray(token_ids)]
    seq, hidden = h.shape
    head_dim = hidden // num_heads
    group = num_heads // num_kv_heads
    causal = np.triu(np.full((seq, seq), -np.inf), k=1)
    layer = 0
    while f"blk.{layer}.attn_norm.weight" in tensors:
        b = f"blk.{layer}."
        x = rms_norm(h, w(b + "attn_norm.weight"), epsilon)
        if b + "attn_qkv.weight" in tensors:  # Phi-3
            qkv = project(x, b + "attn_qkv")
            width, kv_width = num_heads * head_dim, num_kv_heads * head_dim
            assert qkv.shape[-1] == width + 2 * kv_width
            q = qkv[:, :width]
            k = qkv[:, width : width + kv_width]
            v = qkv[:, width + kv_width :]
        else:
            q, k, v = (project(x, b + n) for n in ("attn_q", "attn_k", "attn_v"))
        q = q.reshape(seq, num_heads, head_dim)
        k = k.reshape(seq, num_kv_heads, head_dim)
        v = v.reshape(seq, num_kv_heads, head_dim)
        if b + "attn_q_norm.weight" in tensors:
            q = rms_norm(q, w(b + "attn_q_norm.weight"), epsilon)
            k = rms_norm(k, w(b + "attn_k_norm.weight"), epsilon)
        q, k = rotate(q, base), rotate(k, base)
        heads = []
        for head in range(num_heads):
            scores = q[:, head] @ k[:, head // group].T / np.sqrt(head_dim) + causal
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            scores /= scores.sum(-1, keepdims=True)
            heads.append(scores @ v[:, head // group])
        h = h + np.concatenate(heads, axis=-1) @ w(b + "attn_output.weight").T
        x = rms_norm(h, w(b + "ffn_norm.weight"), epsilon)
        up = x @ w(b + "ffn_up.weight").T
        if b + "ffn_gate.weight" in tensors:
            gate = x @ w(b + "ffn_gate.weight").T
        else:  # Phi-3: gate rows, then up rows
            gate, up = np.split(up, 2, axis=-1)
        h = h + (gate / (1 + np.exp(-gate)) * up) @ w(b + "ffn_down.weight").T
        layer += 1
    h = rms_norm(h, w("output_norm.weight"), epsilon)
    head = w("output.weight") if "output.weight" in tensors else embedding
    return h @ head.T

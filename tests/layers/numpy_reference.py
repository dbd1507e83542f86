"""Independent float64 NumPy implementations of the formulas, for the tests.

Written from the papers' equations with explicit loops over heads and
positions, sharing no code with keras_tfm, so that a test comparing the two
checks the layer against the formula rather than against itself.
"""

import math

import numpy as np


def positional_encoding(seq_len, d_model, start=0, max_wavelength=10000.0):
    pe = np.zeros((seq_len, d_model))
    for t in range(seq_len):
        pos = start + t
        for j in range(d_model):
            i = j // 2
            angle = pos / max_wavelength ** (2 * i / d_model)
            pe[t, j] = math.sin(angle) if j % 2 == 0 else math.cos(angle)
    return pe


def rotary(x, start=0, max_wavelength=10000.0):
    """x: (batch, seq, heads, head_dim); pairs (i, i + head_dim/2)."""
    x = np.asarray(x, np.float64)
    out = np.empty_like(x)
    half = x.shape[-1] // 2
    for t in range(x.shape[1]):
        for i in range(half):
            angle = (start + t) * max_wavelength ** (-2 * i / x.shape[-1])
            c, s = math.cos(angle), math.sin(angle)
            a, b = x[:, t, :, i], x[:, t, :, i + half]
            out[:, t, :, i] = a * c - b * s
            out[:, t, :, i + half] = b * c + a * s
    return out


def softmax(x):
    x = x - x.max(axis=-1, keepdims=True)
    e = np.exp(x)
    return e / e.sum(axis=-1, keepdims=True)


def attention(
    x,
    context,
    w,
    num_heads,
    num_kv_heads,
    head_dim,
    mask=None,
    rotary_positions=False,
    query_key_norm=None,
    logit_soft_cap=None,
):
    """Multi-head attention with explicit per-head loops.

    w: dict of float64 arrays `wq, bq, wkv, bkv, wo, bo`, the kernels of the
    query projection, of the fused key/value projection (columns: all key
    heads, then all value heads) and of the output projection.
    mask: (batch, q, k) booleans, True = attend. A row with no True gets zero
    weights. query_key_norm: optional (query scale, key scale, epsilon):
    each head's query and key RMS-normalized over its features and scaled,
    before the rotation. logit_soft_cap: optional c, the scaled logits
    become c * tanh(logits / c). Returns (outputs, weights (batch, heads,
    q, k)).
    """
    x, context = np.asarray(x, np.float64), np.asarray(context, np.float64)
    batch, q_len, _ = x.shape
    k_len = context.shape[1]
    if mask is None:
        mask = np.ones((batch, q_len, k_len), bool)
    q_all = x @ w["wq"] + w["bq"]
    kv_all = context @ w["wkv"] + w["bkv"]
    k_all = kv_all[..., : num_kv_heads * head_dim]
    v_all = kv_all[..., num_kv_heads * head_dim :]
    group = num_heads // num_kv_heads
    q_heads = q_all.reshape(batch, q_len, num_heads, head_dim)
    k_heads = k_all.reshape(batch, k_len, num_kv_heads, head_dim)
    if query_key_norm is not None:
        query_scale, key_scale, epsilon = query_key_norm
        q_heads = rms_norm(q_heads, query_scale, epsilon)
        k_heads = rms_norm(k_heads, key_scale, epsilon)
    if rotary_positions:
        q_heads, k_heads = rotary(q_heads), rotary(k_heads)
    v_heads = v_all.reshape(batch, k_len, num_kv_heads, head_dim)
    heads, weights = [], np.zeros((batch, num_heads, q_len, k_len))
    for h in range(num_heads):
        q = q_heads[:, :, h]
        k = k_heads[:, :, h // group]
        v = v_heads[:, :, h // group]
        scores = q @ k.transpose(0, 2, 1) / math.sqrt(head_dim)
        if logit_soft_cap is not None:
            scores = logit_soft_cap * np.tanh(scores / logit_soft_cap)
        scores = np.where(mask, scores, -np.inf)
        p = np.zeros_like(scores)
        for b in range(batch):
            for t in range(q_len):
                if mask[b, t].any():
                    p[b, t] = softmax(scores[b, t])
        weights[:, h] = p
        heads.append(p @ v)
    concat = np.concatenate(heads, axis=-1)
    return concat @ w["wo"] + w["bo"], weights


def layer_norm(x, gamma, beta, eps):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def rms_norm(x, scale, eps):
    return x / np.sqrt((x**2).mean(-1, keepdims=True) + eps) * scale


def feed_forward(x, w1, b1, w2, b2, activation, inner_mask=None):
    """`inner_mask`: the inner activations' dropout mask, scale included."""
    h = x @ w1 + b1
    if activation == "relu":
        h = np.maximum(0.0, h)
    elif activation == "gelu":
        erf = np.vectorize(math.erf)
        h = 0.5 * h * (1.0 + erf(h / math.sqrt(2.0)))
    elif activation == "gelu_approximate":
        inner = math.sqrt(2.0 / math.pi) * (h + 0.044715 * h**3)
        h = 0.5 * h * (1.0 + np.tanh(inner))
    elif activation == "silu":
        h = h / (1.0 + np.exp(-h))
    elif activation == "geglu_approximate":  # T5 v1.1: tanh GELU gate
        gate, up = np.split(h, 2, axis=-1)
        inner = math.sqrt(2.0 / math.pi) * (gate + 0.044715 * gate**3)
        h = 0.5 * gate * (1.0 + np.tanh(inner)) * up
    else:  # swiglu: first half gate, second half up
        gate, up = np.split(h, 2, axis=-1)
        h = gate / (1.0 + np.exp(-gate)) * up
    if inner_mask is not None:
        h = h * inner_mask
    return h @ w2 + b2


def residual(x, sublayer, norm, normalize_first, post_norm=None):
    if post_norm is not None:  # sandwich: pre-LN with the output normalized
        return x + post_norm(sublayer(norm(x)))
    if normalize_first:
        return x + sublayer(norm(x))
    return norm(x + sublayer(x))

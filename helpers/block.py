"""A small Llama-style decoder block in eager PyTorch: the model step lessons 08 and 09 work on.

    x -> RMSNorm -> Q, K, V projections -> RoPE on Q and K -> attention -> output projection -> + x
      -> RMSNorm -> gate and up projections -> SiLU(gate) * up -> down projection -> + (residual)

Lesson 08 profiles it as written here; lesson 09 builds the same block from the course's kernels
and checks it against `decoder_block`. Every step is a plain PyTorch call, with the memory it moves
in a comment (T = batch * sequence tokens, d = model width, f = MLP width; elements, not bytes).

`attention` selects the attention step: "naive" writes the T x N scores of every head to memory
and reads them back (lesson 06's starting point); "sdpa" calls PyTorch's fused attention.
"""

import dataclasses
import math

import torch
import torch.nn.functional as F


@dataclasses.dataclass(frozen=True)
class BlockConfig:
    """Sizes of one decoder block. The defaults are a Llama-2-7B layer's."""

    dim: int = 4096          # model width d
    n_heads: int = 32
    hidden: int = 11008      # MLP width f
    eps: float = 1e-5        # RMSNorm's epsilon
    rope_base: float = 10000.0

    @property
    def head_dim(self):
        return self.dim // self.n_heads


SMALL = BlockConfig(dim=256, n_heads=4, hidden=688)   # for the CPU: a whole step in milliseconds


def block_weights(cfg: BlockConfig, device="cpu", dtype=torch.float32, seed=0):
    """Random weights of the block, scaled like a trained layer's (outputs of unit size)."""
    gen = torch.Generator().manual_seed(seed)

    def linear(n_out, n_in):   # (out, in), as nn.Linear stores it
        w = torch.randn(n_out, n_in, generator=gen) / math.sqrt(n_in)
        return w.to(device=device, dtype=dtype)

    d, f = cfg.dim, cfg.hidden
    return {
        "attn_norm": torch.ones(d, device=device, dtype=dtype),
        "wq": linear(d, d), "wk": linear(d, d), "wv": linear(d, d), "wo": linear(d, d),
        "mlp_norm": torch.ones(d, device=device, dtype=dtype),
        "w_gate": linear(f, d), "w_up": linear(f, d), "w_down": linear(d, f),
    }


def block_input(cfg: BlockConfig, batch, seq, device="cpu", dtype=torch.float32, seed=1):
    """Activations entering the block: (batch, seq, dim)."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(batch, seq, cfg.dim, generator=gen).to(device=device, dtype=dtype)


def rms_norm(x, weight, eps):
    """x / rms(x) * weight over the last dimension, computed in float32."""
    xf = x.float()                                                # read Td, write Td (fp32)
    inv_rms = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)  # read Td twice over, write T
    return (xf * inv_rms).to(x.dtype) * weight                    # read Td, write Td (twice)


def rope_tables(cfg: BlockConfig, seq, device="cpu"):
    """cos and sin of the rotary angles, (seq, head_dim / 2), float32."""
    half = cfg.head_dim // 2
    freqs = cfg.rope_base ** (-torch.arange(half, device=device, dtype=torch.float32) / half)
    angles = torch.arange(seq, device=device, dtype=torch.float32)[:, None] * freqs[None, :]
    return angles.cos(), angles.sin()


def rope(x, cos, sin):
    """Rotate each (first half, second half) pair of x's head dimension by the position's angle.

    x: (batch, heads, seq, head_dim). The half-split pairing (as Llama's Hugging Face port does).
    """
    x1, x2 = x.float().chunk(2, dim=-1)
    rotated = torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)
    return rotated.to(x.dtype)


def naive_attention(q, k, v, causal=True):
    """softmax(q k^T / sqrt(D)) v with every head's N x N scores in memory (lesson 06's start)."""
    n = q.shape[-2]
    s = (q @ k.transpose(-2, -1)) * q.shape[-1] ** -0.5          # write N^2 per head
    if causal:
        future = torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1)
        s = s.masked_fill(future, float("-inf"))                  # read and write N^2
    p = torch.softmax(s.float(), dim=-1).to(q.dtype)              # read N^2, write N^2 (and casts)
    return p @ v                                                  # read N^2


def decoder_block(x, w, cfg: BlockConfig, attention="naive"):
    """One pre-norm decoder block, causal: (batch, seq, dim) -> (batch, seq, dim)."""
    B, N, d = x.shape
    H, D = cfg.n_heads, cfg.head_dim
    h = rms_norm(x, w["attn_norm"], cfg.eps)
    q = (h @ w["wq"].T).view(B, N, H, D).transpose(1, 2)         # (B, H, N, D) views, no copy
    k = (h @ w["wk"].T).view(B, N, H, D).transpose(1, 2)
    v = (h @ w["wv"].T).view(B, N, H, D).transpose(1, 2)
    cos, sin = rope_tables(cfg, N, x.device)
    q, k = rope(q, cos, sin), rope(k, cos, sin)
    if attention == "naive":
        a = naive_attention(q, k, v)
    elif attention == "sdpa":
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    else:
        raise ValueError(f"attention must be 'naive' or 'sdpa', not {attention!r}")
    x = x + a.transpose(1, 2).reshape(B, N, d) @ w["wo"].T       # the reshape copies: read, write Td
    h = rms_norm(x, w["mlp_norm"], cfg.eps)
    mlp = F.silu(h @ w["w_gate"].T) * (h @ w["w_up"].T)           # write Tf twice, read them, write Tf
    return x + mlp @ w["w_down"].T


def block_flops(cfg: BlockConfig, batch, seq):
    """Matrix-multiply FLOPs of one forward step (the rest is a rounding error): causal attention
    counted as half of the full N x N products."""
    T, d, f = batch * seq, cfg.dim, cfg.hidden
    projections = 2 * T * d * (4 * d) + 2 * T * d * (3 * f)
    attention = 4 * batch * cfg.n_heads * seq * seq * cfg.head_dim // 2
    return projections + attention

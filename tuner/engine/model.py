"""A Llama-architecture decoder (RMSNorm, RoPE, GQA, SwiGLU, optional MoE) built from a ModelSpec.

Module names follow Hugging Face Llama/Mixtral so a safetensors state dict loads as is. The
forward pass takes a flat list of tokens from many sequences (continuous batching) plus an
`AttentionBatch` saying where each token sits and where its K/V live in the paged cache.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tuner.engine.kv_cache import PagedKVCache
from tuner.specs import ModelSpec

__all__ = ["AttentionBatch", "Transformer", "make_batch"]


@dataclass
class AttentionBatch:
    """Where the T tokens of one step sit: B sequences, each a run of query tokens."""

    positions: Tensor  # [T] absolute position of each token in its sequence
    slots: Tensor  # [T] flat cache slot (block * block_size + offset) for each token's K/V
    block_tables: Tensor  # [B, max_blocks] cache blocks of each sequence (padded with 0)
    seq_lens: Tensor  # [B] tokens in the cache for each sequence after this step
    pad_index: Tensor  # [T] index of each token in the padded [B * q_max] query layout
    last_index: Tensor  # [B] index in [T] of each sequence's last token
    q_max: int  # longest query run in the step


def make_batch(
    runs: list[tuple[list[int], int, int]], block_size: int, device: torch.device | str = "cpu"
) -> AttentionBatch:
    """Build an AttentionBatch from (block_table, start_position, num_tokens) per sequence."""
    positions, slots, pad_index, last_index = [], [], [], []
    q_max = max(n for _, _, n in runs)
    max_blocks = max(len(bt) for bt, _, _ in runs)
    tables = []
    for b, (table, start, n) in enumerate(runs):
        for i in range(n):
            pos = start + i
            positions.append(pos)
            slots.append(table[pos // block_size] * block_size + pos % block_size)
            pad_index.append(b * q_max + i)
        last_index.append(len(positions) - 1)
        tables.append(table + [0] * (max_blocks - len(table)))

    def as_long(values: list[int] | list[list[int]]) -> Tensor:
        return torch.tensor(values, dtype=torch.long, device=device)

    return AttentionBatch(
        positions=as_long(positions),
        slots=as_long(slots),
        block_tables=as_long(tables),
        seq_lens=as_long([s + n for _, s, n in runs]),
        pad_index=as_long(pad_index),
        last_index=as_long(last_index),
        q_max=q_max,
    )


class RMSNorm(nn.Module):
    """x / rms(x) * weight, computed in fp32."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (xf * self.weight.float()).to(x.dtype)


def rope(x: Tensor, positions: Tensor, theta: float) -> Tensor:
    """Rotary embedding, HF 'rotate_half' layout. x: [T, H, D], positions: [T]."""
    d = x.shape[-1]
    inv_freq = 1.0 / theta ** (torch.arange(0, d, 2, device=x.device, dtype=torch.float32) / d)
    angles = positions.float()[:, None] * inv_freq[None, :]  # [T, D/2]
    cos = torch.cat([angles.cos(), angles.cos()], -1)[:, None, :]  # [T, 1, D]
    sin = torch.cat([angles.sin(), angles.sin()], -1)[:, None, :]
    xf = x.float()
    rotated = torch.cat([-xf[..., d // 2 :], xf[..., : d // 2]], -1)
    return (xf * cos + rotated * sin).to(x.dtype)


class Attention(nn.Module):
    """GQA attention over the paged cache."""

    def __init__(self, spec: ModelSpec, layer: int) -> None:
        super().__init__()
        self.layer = layer
        self.n_heads, self.n_kv, self.head_dim = (
            spec.num_attention_heads,
            spec.num_kv_heads,
            spec.head_dim_,
        )
        self.theta = spec.rope_theta
        bias = spec.attention_bias
        d = spec.hidden_size
        self.q_proj = nn.Linear(d, self.n_heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(d, self.n_kv * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(d, self.n_kv * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.n_heads * self.head_dim, d, bias=False)

    def forward(self, x: Tensor, batch: AttentionBatch, cache: PagedKVCache) -> Tensor:
        t = x.shape[0]
        q = self.q_proj(x).view(t, self.n_heads, self.head_dim)  # [T, H, D]
        k = self.k_proj(x).view(t, self.n_kv, self.head_dim)  # [T, Hkv, D]
        v = self.v_proj(x).view(t, self.n_kv, self.head_dim)
        q, k = rope(q, batch.positions, self.theta), rope(k, batch.positions, self.theta)
        cache.write(self.layer, batch.slots, k, v)
        out = cache.attend(self.layer, q, batch)  # [T, H, D]
        return self.o_proj(out.reshape(t, self.n_heads * self.head_dim))


class MLP(nn.Module):
    """SwiGLU: down(silu(gate(x)) * up(x))."""

    def __init__(self, d: int, hidden: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(d, hidden, bias=False)
        self.up_proj = nn.Linear(d, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, d, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Expert(nn.Module):
    """One Mixtral expert: w2(silu(w1(x)) * w3(x))."""

    def __init__(self, d: int, hidden: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(d, hidden, bias=False)
        self.w2 = nn.Linear(hidden, d, bias=False)
        self.w3 = nn.Linear(d, hidden, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class MoE(nn.Module):
    """Top-k routed experts (Mixtral): softmax over the k chosen router logits."""

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.top_k = spec.num_experts_per_tok
        self.gate = nn.Linear(spec.hidden_size, spec.num_experts, bias=False)
        self.experts = nn.ModuleList(
            Expert(spec.hidden_size, spec.intermediate_size) for _ in range(spec.num_experts)
        )

    def forward(self, x: Tensor) -> Tensor:
        logits = self.gate(x).float()  # [T, E]
        weights, chosen = logits.topk(self.top_k, dim=-1)  # [T, k]
        weights = weights.softmax(-1).to(x.dtype)
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            token, slot = (chosen == e).nonzero(as_tuple=True)
            if token.numel():
                out.index_add_(0, token, expert(x[token]) * weights[token, slot, None])
        return out


class Block(nn.Module):
    """Pre-norm decoder layer."""

    def __init__(self, spec: ModelSpec, layer: int) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(spec.hidden_size, spec.rms_norm_eps)
        self.self_attn = Attention(spec, layer)
        self.post_attention_layernorm = RMSNorm(spec.hidden_size, spec.rms_norm_eps)
        # HF names: Llama's dense `mlp`, Mixtral's `block_sparse_moe`.
        self.ffn_name = "block_sparse_moe" if spec.is_moe else "mlp"
        ffn = MoE(spec) if spec.is_moe else MLP(spec.hidden_size, spec.intermediate_size)
        self.add_module(self.ffn_name, ffn)

    def forward(self, x: Tensor, batch: AttentionBatch, cache: PagedKVCache) -> Tensor:
        x = x + self.self_attn(self.input_layernorm(x), batch, cache)
        ffn: nn.Module = getattr(self, self.ffn_name)
        return x + ffn(self.post_attention_layernorm(x))


class Decoder(nn.Module):
    """Embedding, layers and final norm (HF's `model.` prefix)."""

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(spec.vocab_size, spec.hidden_size)
        self.layers = nn.ModuleList(Block(spec, i) for i in range(spec.num_layers))
        self.norm = RMSNorm(spec.hidden_size, spec.rms_norm_eps)


class Transformer(nn.Module):
    """The full causal LM over a paged KV cache."""

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.spec = spec
        self.model = Decoder(spec)
        self.lm_head = nn.Linear(spec.hidden_size, spec.vocab_size, bias=False)
        if spec.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    def forward(
        self,
        tokens: Tensor,
        batch: AttentionBatch,
        cache: PagedKVCache,
        logits_at: Tensor | None = None,
    ) -> Tensor:
        """tokens [T] -> fp32 logits [R, vocab] at rows logits_at [R] (default: all T)."""
        x = self.model.embed_tokens(tokens)  # [T, d]
        for block in self.model.layers:
            x = block(x, batch, cache)
        if logits_at is not None:  # sampling needs only a few rows; the LM head is costly
            x = x[logits_at]  # [R, d]
        return self.lm_head(self.model.norm(x)).float()

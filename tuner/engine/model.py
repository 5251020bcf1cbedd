"""A Llama-architecture decoder (RMSNorm, RoPE, GQA, SwiGLU, optional MoE) built from a ModelSpec.

Module names follow Hugging Face Llama/Mixtral so a safetensors state dict loads as is. The
forward pass takes a flat list of tokens from many sequences (continuous batching) plus an
`AttentionBatch` saying where each token sits and where its K/V live in the paged cache.
"""

from __future__ import annotations

from dataclasses import dataclass, field

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
    _masks: dict[int, Tensor] = field(default_factory=dict)

    def causal_mask(self, key_len: int) -> Tensor:
        """[B, 1, q_max, key_len] bool: query i of a sequence sees keys at positions <= its own.

        Padded query slots see position 0 only (their output is discarded). Built once per step.
        """
        if key_len not in self._masks:
            b = self.block_tables.shape[0]
            q_pos = torch.zeros(b * self.q_max, dtype=torch.long, device=self.positions.device)
            q_pos[self.pad_index] = self.positions
            keys = torch.arange(key_len, device=q_pos.device)
            self._masks[key_len] = (keys[None, None, :] <= q_pos.view(b, self.q_max, 1))[:, None]
        return self._masks[key_len]


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
    """x / rms(x) * weight (torch's fused rms_norm; accumulates in fp32 for 16-bit inputs)."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        return F.rms_norm(x, self.weight.shape, self.weight, self.eps)


def rope_tables(positions: Tensor, head_dim: int, theta: float) -> tuple[Tensor, Tensor]:
    """cos, sin [T, 1, D] for the HF 'rotate_half' RoPE layout; computed once per step."""
    idx = torch.arange(0, head_dim, 2, device=positions.device, dtype=torch.float32)
    inv_freq = 1.0 / theta ** (idx / head_dim)  # [D/2]
    angles = positions.float()[:, None] * inv_freq[None, :]  # [T, D/2]
    angles = torch.cat([angles, angles], -1)[:, None, :]  # [T, 1, D]
    return angles.cos(), angles.sin()


def rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotary embedding. x: [T, H, D]; cos, sin: [T, 1, D]."""
    d = x.shape[-1]
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
        bias = spec.attention_bias
        d = spec.hidden_size
        self.q_proj = nn.Linear(d, self.n_heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(d, self.n_kv * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(d, self.n_kv * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.n_heads * self.head_dim, d, bias=False)
        self.fused = False

    def fuse(self) -> None:
        """Concatenate q/k/v into one `qkv_proj` (one weight read, one kernel call)."""
        parts = [self.q_proj, self.k_proj, self.v_proj]
        d = self.q_proj.in_features
        fused = nn.Linear(d, sum(p.out_features for p in parts), bias=self.q_proj.bias is not None)
        fused = fused.to(device=self.q_proj.weight.device, dtype=self.q_proj.weight.dtype)
        fused.weight.data = torch.cat([p.weight.data for p in parts])
        if fused.bias is not None:
            fused.bias.data = torch.cat([p.bias.data for p in parts if p.bias is not None])
        del self.q_proj, self.k_proj, self.v_proj
        self.qkv_proj, self.fused = fused, True

    def _qkv(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        if not self.fused:
            return self.q_proj(x), self.k_proj(x), self.v_proj(x)
        nq, nkv = self.n_heads * self.head_dim, self.n_kv * self.head_dim
        q, k, v = self.qkv_proj(x).split([nq, nkv, nkv], -1)
        return q, k, v

    def forward(
        self, x: Tensor, batch: AttentionBatch, cache: PagedKVCache, cos: Tensor, sin: Tensor
    ) -> Tensor:
        t = x.shape[0]
        q, k, v = self._qkv(x)
        q = rope(q.reshape(t, self.n_heads, self.head_dim), cos, sin)  # [T, H, D]
        k = rope(k.reshape(t, self.n_kv, self.head_dim), cos, sin)  # [T, Hkv, D]
        v = v.reshape(t, self.n_kv, self.head_dim)
        cache.write(self.layer, batch.slots, k, v)
        out = cache.attend(self.layer, q, batch)  # [T, H, D]
        return self.o_proj(out.reshape(t, self.n_heads * self.head_dim))


def _linears(*shapes: tuple[int, int]) -> tuple[nn.Linear, ...]:
    """Bias-free linear layers (in, out), created (and so registered) in the order given."""
    return tuple(nn.Linear(i, o, bias=False) for i, o in shapes)


class MLP(nn.Module):
    """SwiGLU: down(silu(gate(x)) * up(x))."""

    def __init__(self, d: int, hidden: int) -> None:
        super().__init__()
        self.gate_proj, self.up_proj, self.down_proj = _linears(
            (d, hidden), (d, hidden), (hidden, d)
        )
        self.fused = False

    def fuse(self) -> None:
        """Concatenate gate and up into one `gate_up_proj`."""
        w = torch.cat([self.gate_proj.weight.data, self.up_proj.weight.data])  # [2I, d]
        fused = nn.Linear(w.shape[1], w.shape[0], bias=False).to(device=w.device, dtype=w.dtype)
        fused.weight.data = w
        del self.gate_proj, self.up_proj
        self.gate_up_proj, self.fused = fused, True

    def forward(self, x: Tensor) -> Tensor:
        if self.fused:
            gate, up = self.gate_up_proj(x).chunk(2, -1)
        else:
            gate, up = self.gate_proj(x), self.up_proj(x)
        return self.down_proj(F.silu(gate) * up)


class Expert(nn.Module):
    """One Mixtral expert: w2(silu(w1(x)) * w3(x))."""

    def __init__(self, d: int, hidden: int) -> None:
        super().__init__()
        # Mixtral's checkpoint names: w1 = gate, w3 = up, w2 = down.
        self.w1, self.w2, self.w3 = _linears((d, hidden), (hidden, d), (d, hidden))

    def forward(self, x: Tensor) -> Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class MoE(nn.Module):
    """Top-k routed experts (Mixtral): softmax over the k chosen router logits."""

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.top_k = spec.num_experts_per_tok
        self.gate = nn.Linear(spec.hidden_size, spec.num_experts, bias=False)
        self.experts = nn.ModuleList(
            Expert(spec.hidden_size, spec.expert_intermediate_size) for _ in range(spec.num_experts)
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

    def forward(
        self, x: Tensor, batch: AttentionBatch, cache: PagedKVCache, cos: Tensor, sin: Tensor
    ) -> Tensor:
        x = x + self.self_attn(self.input_layernorm(x), batch, cache, cos, sin)
        return x + self.mlp_or_moe(self.post_attention_layernorm(x))

    @property
    def mlp_or_moe(self) -> nn.Module:
        """The feed-forward module under its HF name."""
        ffn: nn.Module = getattr(self, self.ffn_name)
        return ffn


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

    def fuse_projections(self) -> Transformer:
        """Fuse q/k/v and gate/up weights (after loading, before quantizing), as gpt-fast does."""
        for module in self.modules():
            if isinstance(module, (Attention, MLP)) and not module.fused:
                module.fuse()
        return self

    def forward(
        self,
        tokens: Tensor,
        batch: AttentionBatch,
        cache: PagedKVCache,
        logits_at: Tensor | None = None,
    ) -> Tensor:
        """tokens [T] -> fp32 logits [R, vocab] at rows logits_at [R] (default: all T)."""
        x = self.model.embed_tokens(tokens)  # [T, d]
        cos, sin = rope_tables(batch.positions, self.spec.head_dim_, self.spec.rope_theta)
        for block in self.model.layers:
            x = block(x, batch, cache, cos, sin)
        if logits_at is not None:  # sampling needs only a few rows; the LM head is costly
            x = x[logits_at]  # [R, d]
        return self.lm_head(self.model.norm(x)).float()

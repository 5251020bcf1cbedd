"""Triton paged decode attention: one query token per sequence against its cached K/V blocks.

One program per (sequence, query head). It walks the sequence's block table, loads one cache
block of K/V [block_size, D] at a time (dequantizing int8/fp8 with the per-vector scales),
and keeps an online softmax (running max m, normaliser l, weighted sum acc) so the whole
context is never materialised: out = sum_j softmax(q.k_j / sqrt(D)) v_j.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import torch
import triton
import triton.language as tl
from torch import Tensor

from tuner.engine.kernels import interpreted

__all__ = ["paged_decode_attention"]

_FIXED_WARPS = 4
_AUTOTUNE = [triton.Config({}, num_warps=w, num_stages=s) for w in (1, 2, 4, 8) for s in (1, 2)]


@triton.jit
def _paged_decode_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    ks_ptr,
    vs_ptr,
    bt_ptr,
    lens_ptr,
    out_ptr,
    sm_scale,
    stride_bt,
    num_heads,
    num_kv_heads,
    head_dim,
    GROUP: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    QUANT: tl.constexpr,
):
    b, h = tl.program_id(0), tl.program_id(1)
    kvh = h // GROUP
    d = tl.arange(0, HEAD_DIM)  # [D] (padded to a power of two)
    dmask = d < head_dim
    q = tl.load(q_ptr + (b * num_heads + h) * head_dim + d, mask=dmask, other=0.0).to(tl.float32)
    seq_len = tl.load(lens_ptr + b)
    offs = tl.arange(0, BLOCK_SIZE)  # [BS]
    m_i = tl.max(tl.full((BLOCK_SIZE,), float("-inf"), tl.float32), 0)
    l_i = tl.sum(tl.zeros((BLOCK_SIZE,), tl.float32), 0)
    acc = tl.zeros((HEAD_DIM,), tl.float32)
    for start in range(0, seq_len, BLOCK_SIZE):
        block = tl.load(bt_ptr + b * stride_bt + start // BLOCK_SIZE)
        valid = start + offs < seq_len  # [BS]
        vec = (block * BLOCK_SIZE + offs) * num_kv_heads + kvh  # [BS] (slot, head) index
        kv_off = vec[:, None] * head_dim + d[None, :]  # [BS, D]
        kv_mask = valid[:, None] & dmask[None, :]
        k = tl.load(k_ptr + kv_off, mask=kv_mask, other=0.0).to(tl.float32)
        v = tl.load(v_ptr + kv_off, mask=kv_mask, other=0.0).to(tl.float32)
        if QUANT:
            k = k * tl.load(ks_ptr + vec, mask=valid, other=0.0)[:, None]
            v = v * tl.load(vs_ptr + vec, mask=valid, other=0.0)[:, None]
        s = tl.sum(k * q[None, :], 1) * sm_scale  # [BS]
        s = tl.where(valid, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 0))
        p = tl.exp(s - m_new)  # [BS]
        alpha = tl.exp(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 0)
        acc = acc * alpha + tl.sum(p[:, None] * v, 0)
        m_i = m_new
    out = acc / l_i
    tl.store(
        out_ptr + (b * num_heads + h) * head_dim + d, out.to(out_ptr.dtype.element_ty), mask=dmask
    )


@functools.cache
def _autotuned() -> Any:
    return triton.autotune(configs=_AUTOTUNE, key=["head_dim", "num_heads"])(_paged_decode_kernel)


def paged_decode_attention(
    q: Tensor,
    k_cache: Tensor,
    v_cache: Tensor,
    block_tables: Tensor,
    seq_lens: Tensor,
    k_scale: Tensor | None = None,
    v_scale: Tensor | None = None,
) -> Tensor:
    """q [B, H, D]; caches [num_blocks, block_size, Hkv, D]; scales [num_blocks, bs, Hkv] or
    None; block_tables [B, max_blocks]; seq_lens [B] -> out [B, H, D] in q's dtype."""
    b, h, d = q.shape
    block_size, hkv = k_cache.shape[1], k_cache.shape[2]
    if block_size & (block_size - 1):
        raise ValueError(f"block_size={block_size} must be a power of two for the Triton kernel")
    q = q.contiguous()
    out = torch.empty_like(q)
    quant = k_scale is not None
    dummy = q.new_zeros(1, dtype=torch.float32)
    args = (
        q,
        k_cache,
        v_cache,
        k_scale if quant else dummy,
        v_scale if quant else dummy,
        block_tables.contiguous(),
        seq_lens.contiguous(),
        out,
        1.0 / math.sqrt(d),
        block_tables.stride(0),
        h,
        hkv,
        d,
    )
    meta = {
        "GROUP": h // hkv,
        "BLOCK_SIZE": block_size,
        "HEAD_DIM": triton.next_power_of_2(d),
        "QUANT": quant,
    }
    if interpreted() or not q.is_cuda:
        _paged_decode_kernel[(b, h)](*args, **meta, num_warps=_FIXED_WARPS)
    else:
        _autotuned()[(b, h)](*args, **meta)
    return out

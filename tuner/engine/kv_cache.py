"""Paged KV cache: fixed-size blocks, a block table per sequence, 16-bit/fp8/int8 storage.

Storage per layer: k, v [num_blocks, block_size, Hkv, D]. fp8 (e4m3) and int8 keep one fp32
scale per stored (token, head) vector (absmax / dtype max), so attention dequantizes exactly what
was written. Reads gather a sequence's blocks through its block table.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor

if TYPE_CHECKING:
    from tuner.engine.model import AttentionBatch

__all__ = ["BlockAllocator", "KV_STORAGE_DTYPES", "PagedKVCache"]

# Storage name (the engine's KV precision knob) -> torch dtype (None: the activation dtype).
KV_STORAGE_DTYPES: dict[str, torch.dtype | None] = {
    "auto": None,
    "fp8": torch.float8_e4m3fn,
    "int8": torch.int8,
}
# Largest finite magnitude of each quantized storage dtype.
_QMAX = {torch.float8_e4m3fn: 448.0, torch.int8: 127.0}
# One fp32 scale per stored (token, head) vector: tuner.perf.precision.KV_SCALE_BYTES counts it.


class BlockAllocator:
    """Free list of cache block ids."""

    def __init__(self, num_blocks: int) -> None:
        self.num_blocks = num_blocks
        self._free = list(range(num_blocks - 1, -1, -1))

    @property
    def num_free(self) -> int:
        """Blocks not held by any sequence."""
        return len(self._free)

    def allocate(self, n: int) -> list[int]:
        """Take n blocks; the caller checks num_free first."""
        if n > len(self._free):
            raise MemoryError(f"need {n} KV blocks, {len(self._free)} free")
        return [self._free.pop() for _ in range(n)]

    def free(self, blocks: list[int]) -> None:
        """Return blocks to the pool."""
        self._free.extend(reversed(blocks))


class PagedKVCache:
    """Per-layer paged K/V storage with attention that reads the stored dtype."""

    def __init__(
        self,
        *,
        num_layers: int,
        num_blocks: int,
        block_size: int,
        num_kv_heads: int,
        head_dim: int,
        storage: str = "auto",
        act_dtype: torch.dtype = torch.bfloat16,
        device: torch.device | str = "cpu",
        use_triton: bool = False,
    ) -> None:
        self.block_size, self.act_dtype, self.use_triton = block_size, act_dtype, use_triton
        self.storage = KV_STORAGE_DTYPES[storage] or act_dtype
        self.quantized = self.storage in _QMAX
        shape = (num_blocks, block_size, num_kv_heads, head_dim)
        self.k = [torch.zeros(shape, dtype=self.storage, device=device) for _ in range(num_layers)]
        self.v = [torch.zeros(shape, dtype=self.storage, device=device) for _ in range(num_layers)]
        scale_shape = shape[:3] if self.quantized else (0,)
        self.k_scale = [torch.ones(scale_shape, device=device) for _ in range(num_layers)]
        self.v_scale = [torch.ones(scale_shape, device=device) for _ in range(num_layers)]

    def _quantize(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """x: [T, Hkv, D] -> (stored [T, Hkv, D], scale [T, Hkv])."""
        qmax = _QMAX[self.storage]
        scale = x.float().abs().amax(-1).clamp(min=1e-8) / qmax  # [T, Hkv]
        q = x.float() / scale[..., None]
        q = q.round().clamp(-qmax, qmax) if self.storage == torch.int8 else q
        return q.to(self.storage), scale

    def write(self, layer: int, slots: Tensor, k: Tensor, v: Tensor) -> None:
        """Store K/V of T tokens at flat slots [T]; k, v: [T, Hkv, D]."""
        kf, vf = self.k[layer].flatten(0, 1), self.v[layer].flatten(0, 1)  # [slots, Hkv, D]
        if not self.quantized:
            kf[slots], vf[slots] = k.to(self.storage), v.to(self.storage)
            return
        (kq, ks), (vq, vs) = self._quantize(k), self._quantize(v)
        kf[slots], vf[slots] = kq, vq
        self.k_scale[layer].flatten(0, 1)[slots] = ks
        self.v_scale[layer].flatten(0, 1)[slots] = vs

    def gather(self, layer: int, block_tables: Tensor) -> tuple[Tensor, Tensor]:
        """Dequantized K/V of each sequence: block_tables [B, nb] -> k, v [B, nb * bs, Hkv, D]."""
        b = block_tables.shape[0]

        def read(store: Tensor, scale: Tensor) -> Tensor:
            x = store[block_tables].flatten(1, 2)  # [B, L, Hkv, D]
            if self.quantized:
                x = x.float() * scale[block_tables].flatten(1, 2)[..., None]
            return x.to(self.act_dtype).reshape(b, -1, *store.shape[2:])

        return read(self.k[layer], self.k_scale[layer]), read(self.v[layer], self.v_scale[layer])

    def attend(self, layer: int, q: Tensor, batch: AttentionBatch) -> Tensor:
        """Causal attention of queries q [T, H, D] over each sequence's cached K/V -> [T, H, D]."""
        if self.use_triton and batch.q_max == 1 and q.is_cuda:
            from tuner.engine.kernels.paged_attention import paged_decode_attention

            return paged_decode_attention(
                q,
                self.k[layer],
                self.v[layer],
                batch.block_tables,
                batch.seq_lens,
                self.k_scale[layer] if self.quantized else None,
                self.v_scale[layer] if self.quantized else None,
            )
        t, h, d = q.shape
        k, v = self.gather(layer, batch.block_tables)  # [B, L, Hkv, D]
        nb = k.shape[0]
        if batch.q_max == 1:  # pure decode: one query per sequence, no padding needed
            q_pad = q
        else:
            q_pad = q.new_zeros(nb * batch.q_max, h, d)
            q_pad[batch.pad_index] = q
        mask = batch.causal_mask(k.shape[1])  # [B, 1, Q, L]
        out = F.scaled_dot_product_attention(
            q_pad.view(nb, batch.q_max, h, d).transpose(1, 2),  # [B, H, Q, D]
            k.transpose(1, 2),  # [B, Hkv, L, D]
            v.transpose(1, 2),
            attn_mask=mask,
            enable_gqa=True,
        )  # [B, H, Q, D]
        out = out.transpose(1, 2).reshape(nb * batch.q_max, h, d)
        return out if batch.q_max == 1 else out[batch.pad_index]

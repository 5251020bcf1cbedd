"""Run under TRITON_INTERPRET=1 in a subprocess: Triton kernels vs torch references -> JSON."""

from __future__ import annotations

import json
import os

assert os.environ.get("TRITON_INTERPRET") == "1", "run with TRITON_INTERPRET=1"

import torch  # noqa: E402

from tuner.engine.kernels.int8_matmul import int8_weight_only_matmul  # noqa: E402
from tuner.engine.kernels.paged_attention import paged_decode_attention  # noqa: E402
from tuner.engine.kv_cache import PagedKVCache  # noqa: E402
from tuner.engine.model import make_batch  # noqa: E402


def matmul_errors() -> dict[str, float]:
    """Max abs error of the int8 matmul against dequantize-then-matmul, fp32 and fp16."""
    g = torch.Generator().manual_seed(0)
    out = {}
    for name, dtype in (("fp32", torch.float32), ("fp16", torch.float16)):
        for m, n, k in ((1, 48, 40), (19, 70, 96)):
            x = torch.randn(m, k, generator=g).to(dtype)
            w = torch.randint(-127, 128, (n, k), generator=g, dtype=torch.int8)
            s = (torch.rand(n, generator=g) * 0.01).to(dtype)
            ref = x.float() @ (w.float() * s.float()[:, None]).t()
            got = int8_weight_only_matmul(x, w, s).float()
            out[f"int8_matmul_{name}_{m}x{n}x{k}"] = float((got - ref).abs().max())
    return out


def attention_errors() -> dict[str, float]:
    """Max abs error of the paged decode kernel against the cache's torch attention path."""
    g = torch.Generator().manual_seed(1)
    out = {}
    heads, kv_heads, head_dim, bs = 4, 2, 24, 4
    lens = [5, 11, 1]
    for kv_dtype, act in (
        ("auto", torch.float32),
        ("auto", torch.float16),
        ("int8", torch.float32),
    ):
        cache = PagedKVCache(
            num_layers=1, num_blocks=16, block_size=bs, num_kv_heads=kv_heads,
            head_dim=head_dim, storage=kv_dtype, act_dtype=act,
        )  # fmt: skip
        tables = [[3, 7, 1], [0, 2, 9, 12], [5]]
        prefill = make_batch([(t, 0, n) for t, n in zip(tables, lens, strict=True)], bs)
        total = sum(lens)
        k = torch.randn(total, kv_heads, head_dim, generator=g).to(act)
        v = torch.randn(total, kv_heads, head_dim, generator=g).to(act)
        cache.write(0, prefill.slots, k, v)
        decode = make_batch([(t, n - 1, 1) for t, n in zip(tables, lens, strict=True)], bs)
        q = torch.randn(len(lens), heads, head_dim, generator=g).to(act)
        ref = cache.attend(0, q, decode).float()
        got = paged_decode_attention(
            q, cache.k[0], cache.v[0], decode.block_tables, decode.seq_lens,
            cache.k_scale[0] if cache.quantized else None,
            cache.v_scale[0] if cache.quantized else None,
        ).float()  # fmt: skip
        out[f"paged_attention_{kv_dtype}_{str(act).split('.')[-1]}"] = float(
            (got - ref).abs().max()
        )
    return out


if __name__ == "__main__":
    print(json.dumps({**matmul_errors(), **attention_errors()}))

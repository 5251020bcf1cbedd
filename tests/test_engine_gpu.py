"""CUDA paths: autotuned Triton kernels vs torch in bf16, and a measured torch-backend run."""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.gpu


def test_triton_int8_matmul_matches_torch_on_cuda() -> None:
    from tuner.engine.kernels.int8_matmul import int8_weight_only_matmul

    g = torch.Generator(device="cuda").manual_seed(0)
    for m, n, k in ((1, 4096, 4096), (37, 1536, 576), (256, 11008, 4096)):
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=g)
        w = torch.randint(-127, 128, (n, k), device="cuda", dtype=torch.int8, generator=g)
        s = torch.rand(n, device="cuda", dtype=torch.bfloat16, generator=g) * 0.01
        ref = x.float() @ (w.float() * s.float()[:, None]).t()
        got = int8_weight_only_matmul(x, w, s).float()
        assert torch.allclose(got, ref, atol=0.05, rtol=0.02)


@pytest.mark.parametrize("kv_dtype", ["auto", "int8", "fp8"])
def test_triton_paged_decode_matches_torch_on_cuda(kv_dtype: str) -> None:
    from tuner.engine.kernels.paged_attention import paged_decode_attention
    from tuner.engine.kv_cache import PagedKVCache
    from tuner.engine.model import make_batch

    g = torch.Generator(device="cuda").manual_seed(1)
    cache = PagedKVCache(
        num_layers=1,
        num_blocks=64,
        block_size=16,
        num_kv_heads=8,
        head_dim=128,
        storage=kv_dtype,
        act_dtype=torch.bfloat16,
        device="cuda",
    )
    lens = [1, 100, 333]
    tables = [[0], list(range(1, 8)), list(range(8, 29))]
    prefill = make_batch([(t, 0, n) for t, n in zip(tables, lens, strict=True)], 16, "cuda")
    k = torch.randn(sum(lens), 8, 128, device="cuda", dtype=torch.bfloat16, generator=g)
    v = torch.randn(sum(lens), 8, 128, device="cuda", dtype=torch.bfloat16, generator=g)
    cache.write(0, prefill.slots, k, v)
    decode = make_batch([(t, n - 1, 1) for t, n in zip(tables, lens, strict=True)], 16, "cuda")
    q = torch.randn(3, 32, 128, device="cuda", dtype=torch.bfloat16, generator=g)
    ref = cache.attend(0, q, decode).float()
    got = paged_decode_attention(
        q,
        cache.k[0],
        cache.v[0],
        decode.block_tables,
        decode.seq_lens,
        cache.k_scale[0] if cache.quantized else None,
        cache.v_scale[0] if cache.quantized else None,
    ).float()
    assert torch.allclose(got, ref, atol=2e-2, rtol=2e-2)


def test_torch_backend_measures_on_cuda() -> None:
    from tuner.backends import get_backend
    from tuner.catalog import load_gpu, load_model, load_sla
    from tuner.specs import Context, EngineConfig, Workload

    ctx = Context(
        model=load_model("llama-tiny-20m"),
        gpu=load_gpu("h200-sxm"),
        sla=load_sla("chat"),
        workload=Workload(input_tokens=128, output_tokens=32, concurrency=8, num_requests=16),
    )
    for quant in ("bf16", "int8-wo", "fp8"):
        m = get_backend("torch", device="cuda").evaluate(EngineConfig(quantization=quant), ctx)
        assert m.feasible, m.reason
        assert m.extra["device"] == "cuda" and m.output_tokens_per_s > 0

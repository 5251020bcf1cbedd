"""Quantized variants stay within stated error bounds of the unquantized model; KV likewise."""

from __future__ import annotations

import pytest
import torch
from _engine_fixtures import prompts, tiny_model, tiny_spec

from tuner.engine.generate import prefill_logits
from tuner.engine.quantize import (
    Int4WeightOnlyLinear,
    int4_group_size,
    int4_quantize,
    quantization_error,
    quantize_model,
)

pytestmark = pytest.mark.unit

# Mean KL (nats) and max |logit diff| bounds on the tiny fp32 model (hidden 128, logit std ~5.6;
# measured: int8-wo 0.005 / 0.85, int8 0.012 / 0.98, fp8 0.06 / 2.9, int4 1.1 / 7.8). Random
# Gaussian weights are the worst case for 4-bit round-to-nearest; real weights do better.
BOUNDS = {
    "int8-wo": (0.02, 2.5),
    "int8": (0.05, 3.0),
    "fp8": (0.25, 6.0),
    "int4-awq": (3.0, 16.0),
    "int4-gptq": (3.0, 16.0),
}
KV_BOUNDS = {"int8": (0.005, 1.0), "fp8": (0.08, 4.0)}  # measured 0.0009 / 0.25, 0.017 / 1.7
EXPECTED_PATH = {
    "int8-wo": "aten._weight_int8pack_mm",
    "int8": "aten._int_mm",
    "fp8": "dequant-fp8+F.linear",
    "int4-awq": "aten._weight_int4pack_mm_for_cpu(g128)",
    "int4-gptq": "aten._weight_int4pack_mm_for_cpu(g128)",
}
SPEC = tiny_spec(hidden_size=128, intermediate_size=256)
TOKENS = prompts([48])[0]


@pytest.fixture(scope="module")
def reference() -> torch.Tensor:
    return prefill_logits(tiny_model(SPEC), TOKENS)


@pytest.mark.parametrize("kind", sorted(BOUNDS))
def test_variant_error_within_bounds(kind: str, reference: torch.Tensor) -> None:
    model = tiny_model(SPEC)
    paths = quantize_model(model, kind)
    assert EXPECTED_PATH[kind] in paths  # the fast CPU kernel ran (LM head N=97 may fall back)
    err = quantization_error(reference, prefill_logits(model, TOKENS))
    kl_max, diff_max = BOUNDS[kind]
    assert 0 < err["kl_divergence"] < kl_max
    assert 0 < err["max_abs_logit_diff"] < diff_max


def test_error_orders_with_bits(reference: torch.Tensor) -> None:
    kl = {}
    for kind in ("int8-wo", "fp8", "int4-awq"):
        model = tiny_model(SPEC)
        quantize_model(model, kind)
        kl[kind] = quantization_error(reference, prefill_logits(model, TOKENS))["kl_divergence"]
    assert kl["int8-wo"] < kl["fp8"] < kl["int4-awq"]


def test_bf16_int8_weight_only_matches_dequantized_reference() -> None:
    lin = torch.nn.Linear(128, 64, bias=False).to(torch.bfloat16)
    model = torch.nn.Sequential(lin)
    x = torch.randn(5, 128, dtype=torch.bfloat16)
    quantize_model(model, "int8-wo")
    q = model[0]
    ref = x.float() @ (q.weight.float() * q.scales.float()[:, None]).t()
    assert torch.allclose(model(x).float(), ref, atol=0.05, rtol=0.02)


@pytest.mark.parametrize("k", [256, 576, 96])
def test_int4_kernel_matches_its_dequantization(k: int) -> None:
    torch.manual_seed(0)
    lin = torch.nn.Linear(k, 64, bias=False).to(torch.bfloat16)
    layer = Int4WeightOnlyLinear(lin)
    group = int4_group_size(k)
    assert group == {256: 128, 576: 64, 96: 32}[k]
    q, scale, zero = int4_quantize(lin.weight.data, group)
    assert int(q.min()) >= 0 and int(q.max()) <= 15
    deq = (q.float().reshape(64, k // group, group) - 8) * scale[..., None] + zero[..., None]
    deq = deq.reshape(64, k)
    rel = (deq - lin.weight.float()).norm() / lin.weight.float().norm()
    assert rel < 0.1  # 4-bit RTN of uniform weights: step/sqrt(12) relative error ~ 0.07
    x = torch.randn(3, k, dtype=torch.bfloat16)
    ref = x.float() @ deq.t()
    assert torch.allclose(layer(x).float(), ref, atol=0.02, rtol=0.02)


@pytest.mark.parametrize("kv_dtype", sorted(KV_BOUNDS))
def test_paged_kv_quantized_within_bounds(kv_dtype: str, reference: torch.Tensor) -> None:
    logits = prefill_logits(tiny_model(SPEC), TOKENS, kv_dtype=kv_dtype)
    err = quantization_error(reference, logits)
    kl_max, diff_max = KV_BOUNDS[kv_dtype]
    assert 0 < err["kl_divergence"] < kl_max
    assert err["max_abs_logit_diff"] < diff_max


def test_kv_cache_stores_the_requested_dtype() -> None:
    from tuner.engine.generate import make_cache

    model = tiny_model(SPEC)
    for kv, dtype in (("auto", torch.float32), ("fp8", torch.float8_e4m3fn), ("int8", torch.int8)):
        assert make_cache(model, 4, 16, kv).k[0].dtype == dtype

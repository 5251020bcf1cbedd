"""Memory planner: physics invariants (hypothesis), quantization bytes, infeasibility reasons."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tuner import catalog
from tuner.perf.memory import (
    GIB,
    kv_bytes_per_token,
    kv_heads_per_gpu,
    plan_memory,
    weight_bytes_per_gpu,
)
from tuner.specs import EngineConfig, KVDtype, Quantization, Workload

pytestmark = pytest.mark.unit

MODELS = catalog.list_names("models")
GPUS = catalog.list_names("hardware_profiles")
QUANTS = list(Quantization)


@settings(max_examples=60, deadline=None)
@given(
    model=st.sampled_from(MODELS),
    gpu=st.sampled_from(GPUS),
    quant=st.sampled_from(QUANTS),
    extra_gib=st.floats(min_value=0.5, max_value=200),
    tp=st.sampled_from([1, 2, 4, 8]),
)
def test_more_gpu_memory_never_lowers_kv_capacity(
    model: str, gpu: str, quant: Quantization, extra_gib: float, tp: int
) -> None:
    m, g = catalog.load_model(model), catalog.load_gpu(gpu)
    bigger = g.model_copy(update={"memory_gib": g.memory_gib + extra_gib})
    cfg = EngineConfig(quantization=quant, tensor_parallel_size=tp)
    wl = Workload()
    small = plan_memory(m, g, cfg, wl)
    large = plan_memory(m, bigger, cfg, wl)
    assert large.kv_capacity_tokens >= small.kv_capacity_tokens
    assert large.max_concurrent_seqs >= small.max_concurrent_seqs
    assert large.feasible or not small.feasible


@settings(max_examples=60, deadline=None)
@given(
    model=st.sampled_from(MODELS),
    gpu=st.sampled_from(GPUS),
    quant=st.sampled_from([q for q in QUANTS if q not in (Quantization.bf16, Quantization.fp16)]),
    tp=st.sampled_from([1, 2, 4, 8]),
)
def test_quantized_weights_never_take_more_memory_than_bf16(
    model: str, gpu: str, quant: Quantization, tp: int
) -> None:
    m, g = catalog.load_model(model), catalog.load_gpu(gpu)
    assert weight_bytes_per_gpu(m, quant, g, tp) <= weight_bytes_per_gpu(
        m, Quantization.bf16, g, tp
    )
    cfg_q = EngineConfig(quantization=quant, tensor_parallel_size=tp)
    cfg_b = EngineConfig(quantization=Quantization.bf16, tensor_parallel_size=tp)
    wl = Workload()
    assert (
        plan_memory(m, g, cfg_q, wl).kv_capacity_tokens
        >= plan_memory(m, g, cfg_b, wl).kv_capacity_tokens
    )


def test_weight_bytes_match_parameter_count_and_include_group_scales() -> None:
    m, g = catalog.load_model("llama-3.1-8b"), catalog.load_gpu("h200-sxm")
    bf16 = weight_bytes_per_gpu(m, Quantization.bf16, g, 1)
    assert bf16 == pytest.approx(2 * m.num_params, rel=1e-6)  # 16.06 GB for 8.03 B params
    int4 = weight_bytes_per_gpu(m, Quantization.int4_awq, g, 1)
    linear = m.num_params - m.embedding_params - m.norm_params
    sixteen_bit = 2 * (m.embedding_params + m.norm_params)
    # 4 bits per weight plus a 2-byte scale and a 4-bit zero per group of 128 weights.
    assert int4 == pytest.approx(linear * (0.5 + 2.5 / 128) + sixteen_bit, rel=1e-6)
    assert int4 > linear * 0.5 + sixteen_bit


def test_kv_bytes_per_token_shards_and_replicates_kv_heads() -> None:
    m = catalog.load_model("llama-3.1-8b")  # 32 layers, 8 KV heads, head_dim 128
    assert kv_bytes_per_token(m, KVDtype.auto, 1) == 2 * 32 * 8 * 128 * 2  # 128 KiB
    assert kv_bytes_per_token(m, KVDtype.fp8, 1) == 2 * 32 * 8 * (128 * 1 + 4)  # + fp32 scale
    assert kv_bytes_per_token(m, KVDtype.auto, 4) == 2 * 32 * 2 * 128 * 2
    # 8 KV heads over 16 shards: each shard keeps one replicated head.
    assert kv_heads_per_gpu(m, 16) == 1
    assert kv_bytes_per_token(m, KVDtype.auto, 16) == kv_bytes_per_token(m, KVDtype.auto, 8)


def test_weights_that_do_not_fit_are_infeasible_with_the_numbers() -> None:
    m, g = catalog.load_model("llama-3.1-405b"), catalog.load_gpu("h200-sxm")
    plan = plan_memory(m, g, EngineConfig(), Workload())
    assert not plan.feasible
    assert plan.reason is not None
    weights_gib = f"{plan.weights_bytes / GIB:.1f} GiB"
    assert weights_gib in plan.reason and "126.9 GiB" in plan.reason and "141" in plan.reason
    assert plan.kv_capacity_tokens == 0


def test_kv_too_small_for_one_sequence_is_infeasible() -> None:
    m, g = catalog.load_model("llama-3.1-8b"), catalog.load_gpu("rtx-4090")
    plan = plan_memory(m, g, EngineConfig(), Workload(input_tokens=100_000, output_tokens=1000))
    assert not plan.feasible
    assert plan.reason and "101000-token sequence" in plan.reason


def test_capacity_counts_full_length_sequences() -> None:
    m, g = catalog.load_model("llama-3.1-8b"), catalog.load_gpu("h200-sxm")
    cfg = EngineConfig(max_num_seqs=4096)
    plan = plan_memory(m, g, cfg, Workload(input_tokens=1024, output_tokens=1024))
    assert plan.feasible
    assert plan.kv_capacity_tokens % cfg.block_size == 0
    assert plan.max_concurrent_seqs == plan.kv_capacity_blocks // (2048 // cfg.block_size)
    used = plan.weights_bytes + plan.workspace_bytes + plan.runtime_bytes
    assert used + plan.kv_capacity_tokens * plan.kv_bytes_per_token <= plan.budget_bytes

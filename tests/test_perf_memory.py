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
    kv_pool_bytes,
    plan_memory,
    weight_bytes_per_gpu,
)
from tuner.specs import Engine, EngineConfig, KVDtype, Quantization, Workload

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
    engine=st.sampled_from(list(Engine)),
)
def test_more_gpu_memory_never_lowers_kv_capacity(
    model: str, gpu: str, quant: Quantization, extra_gib: float, tp: int, engine: Engine
) -> None:
    m, g = catalog.load_model(model), catalog.load_gpu(gpu)
    bigger = g.model_copy(update={"memory_gib": g.memory_gib + extra_gib})
    cfg = EngineConfig(quantization=quant, tensor_parallel_size=tp, engine=engine)
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


@settings(max_examples=200, deadline=None)
@given(
    engine=st.sampled_from(list(Engine)),
    memory=st.floats(min_value=8.0, max_value=300.0),
    fraction=st.floats(min_value=0.5, max_value=0.98),
    weights=st.floats(min_value=0.0, max_value=300.0),
    transient=st.floats(min_value=0.0, max_value=20.0),
    more=st.floats(min_value=0.0, max_value=0.5),
)
def test_every_engines_kv_pool_grows_with_its_fraction_and_shrinks_with_the_weights(
    engine: Engine, memory: float, fraction: float, weights: float, transient: float, more: float
) -> None:
    def pool(frac: float, w: float) -> float:
        return max(0.0, kv_pool_bytes(engine, memory, frac, w, transient)[1])  # < 0: no pool

    free = pool(fraction, weights)
    assert pool(min(1.0, fraction + more), weights) >= free >= pool(fraction, weights + 1.0)
    # No engine hands the KV pool more than its fraction of the memory the weights leave.
    assert free <= max(0.0, fraction * (memory - weights)) + 1e-9


def test_each_engine_sizes_its_kv_pool_by_its_own_rule() -> None:
    """DeepSeek-R1 FP8 on 4 B200s at the same 0.9: the weights take 157 GiB of 180 GiB. vLLM's
    0.9 x 180 GiB must also hold the activations and runtime, so little is left; SGLang's 0.9 x
    180 GiB holds only the weights and the pool; TensorRT-LLM takes 0.9 of what the weights,
    activations and runtime leave (its KvCacheCreator._cal_max_memory)."""
    m, g = catalog.load_model("deepseek-r1"), catalog.load_gpu("b200")
    wl = Workload(input_tokens=8192, output_tokens=1024)
    plans = {
        e: plan_memory(
            m,
            g,
            EngineConfig(
                quantization=Quantization.fp8_block,
                kv_dtype=KVDtype.fp8,
                tensor_parallel_size=4,
                engine=e,
            ),
            wl,
        )
        for e in Engine
    }
    vllm, sglang, trt = plans[Engine.vllm], plans[Engine.sglang], plans[Engine.trtllm]
    memory, weights = g.memory_bytes, vllm.weights_bytes
    transient = vllm.workspace_bytes + vllm.runtime_bytes
    kv = {e: p.kv_capacity_tokens * p.kv_bytes_per_token for e, p in plans.items()}
    block = vllm.kv_bytes_per_token * 16  # the pool is whole blocks: at most one short
    assert kv[Engine.vllm] == pytest.approx(0.9 * memory - weights - transient, abs=block)
    assert kv[Engine.sglang] == pytest.approx(0.9 * memory - weights, abs=block)
    assert kv[Engine.trtllm] == pytest.approx(0.9 * (memory - weights - transient), abs=block)
    assert vllm.max_concurrent_seqs < sglang.max_concurrent_seqs < trt.max_concurrent_seqs
    assert trt.budget_bytes == pytest.approx(memory - transient)


def test_sglang_activations_must_fit_the_reserve_its_fraction_leaves() -> None:
    """SGLang sizes its pool from --mem-fraction-static alone, so activations and the runtime
    need the 1 - fraction left over: at 0.98 of a 24 GiB card, 0.5 GiB is not enough."""
    m, g = catalog.load_model("llama-3.1-8b"), catalog.load_gpu("rtx-4090")
    wl = Workload(input_tokens=512, output_tokens=128)
    tight = EngineConfig(
        quantization=Quantization.int4_awq, engine=Engine.sglang, gpu_memory_utilization=0.98
    )
    plan = plan_memory(m, g, tight, wl)
    assert not plan.feasible and plan.reason and "--mem-fraction-static" in plan.reason
    assert plan_memory(m, g, tight.model_copy(update={"gpu_memory_utilization": 0.85}), wl).feasible

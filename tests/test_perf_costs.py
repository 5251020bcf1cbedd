"""Step-cost roofline: single-stream physics, monotonicity invariants, quantization per GPU."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tuner import catalog
from tuner.backends import get_backend
from tuner.perf.costs import expected_experts_touched, step_cost_model
from tuner.perf.efficiency import DEFAULT_EFFICIENCY, Efficiency
from tuner.perf.memory import plan_memory, weight_bytes_per_gpu
from tuner.perf.precision import precision_for
from tuner.specs import SLA, Context, EngineConfig, Quantization, Workload

pytestmark = pytest.mark.unit

MODELS = catalog.list_names("models")
GPUS = catalog.list_names("hardware_profiles")
DENSE_MODELS = [n for n in MODELS if not catalog.load_model(n).is_moe]


def _batch1_tpot_ms(model: str, gpu: str, quant: str = "fp16") -> float:
    """TPOT of one request at a time through the full sim backend."""
    ctx = Context(
        model=catalog.load_model(model),
        gpu=catalog.load_gpu(gpu),
        sla=SLA(),
        workload=Workload(input_tokens=128, output_tokens=128, concurrency=1, num_requests=2),
    )
    metrics = get_backend("sim").evaluate(EngineConfig(quantization=quant), ctx)
    assert metrics.feasible, metrics.reason
    return metrics.tpot_ms.mean


@pytest.mark.parametrize(
    ("gpu", "low_ms", "high_ms"), [("h200-sxm", 4.0, 7.0), ("rtx-4090", 15.0, 25.0)]
)
def test_llama2_7b_fp16_single_stream_tpot_matches_known_range(
    gpu: str, low_ms: float, high_ms: float
) -> None:
    assert low_ms <= _batch1_tpot_ms("llama-2-7b", gpu) <= high_ms


@settings(max_examples=40, deadline=None)
@given(
    model=st.sampled_from(DENSE_MODELS),  # MoE: only the routed experts are read (tested below)
    gpu=st.sampled_from(GPUS),
    quant=st.sampled_from(list(Quantization)),
    ctx_len=st.integers(min_value=1, max_value=32_000),
)
def test_decode_never_beats_reading_the_weights_at_peak_bandwidth(
    model: str, gpu: str, quant: Quantization, ctx_len: int
) -> None:
    m, g = catalog.load_model(model), catalog.load_gpu(gpu)
    cost = step_cost_model(m, g, EngineConfig(quantization=quant))
    # Weights minus the input embedding (a lookup reads one row per token).
    streamed = weight_bytes_per_gpu(m, quant, g, 1) - 2 * m.vocab_size * m.hidden_size
    floor_s = streamed / (g.memory_bandwidth_gbps * 1e9)
    assert cost.decode_step_s(1, ctx_len) >= floor_s


@settings(max_examples=40, deadline=None)
@given(
    model=st.sampled_from(MODELS),
    gpu=st.sampled_from(GPUS),
    factor=st.floats(min_value=1.0, max_value=10.0),
    batch=st.integers(min_value=1, max_value=512),
    ctx_len=st.integers(min_value=1, max_value=16_000),
    tp=st.sampled_from([1, 2, 4]),
)
def test_higher_bandwidth_never_raises_step_time(
    model: str, gpu: str, factor: float, batch: int, ctx_len: int, tp: int
) -> None:
    m, g = catalog.load_model(model), catalog.load_gpu(gpu)
    faster = g.model_copy(update={"memory_bandwidth_gbps": g.memory_bandwidth_gbps * factor})
    cfg = EngineConfig(tensor_parallel_size=tp)
    slow_cost, fast_cost = step_cost_model(m, g, cfg), step_cost_model(m, faster, cfg)
    assert fast_cost.decode_step_s(batch, ctx_len) <= slow_cost.decode_step_s(batch, ctx_len)
    assert fast_cost.prefill_attn_s(ctx_len, 0) <= slow_cost.prefill_attn_s(ctx_len, 0)


@settings(max_examples=15, deadline=None)
@given(gpu=st.sampled_from(["h200-sxm", "a100-80gb-sxm", "l40s"]), factor=st.floats(1.0, 4.0))
def test_higher_bandwidth_never_raises_simulated_single_stream_tpot(
    gpu: str, factor: float
) -> None:
    g = catalog.load_gpu(gpu)
    faster = g.model_copy(update={"memory_bandwidth_gbps": g.memory_bandwidth_gbps * factor})
    wl = Workload(input_tokens=256, output_tokens=64, concurrency=1, num_requests=2)
    m = catalog.load_model("llama-3.1-8b")
    backend = get_backend("sim")
    slow = backend.evaluate(EngineConfig(), Context(model=m, gpu=g, sla=SLA(), workload=wl))
    fast = backend.evaluate(EngineConfig(), Context(model=m, gpu=faster, sla=SLA(), workload=wl))
    assert fast.tpot_ms.p50 <= slow.tpot_ms.p50
    assert fast.ttft_ms.p50 <= slow.ttft_ms.p50


@settings(max_examples=40, deadline=None)
@given(
    gpu=st.sampled_from(GPUS),
    extra_layers=st.integers(min_value=0, max_value=64),
    width_factor=st.sampled_from([1, 2, 3]),
    batch=st.integers(min_value=1, max_value=256),
    ctx_len=st.integers(min_value=1, max_value=8192),
)
def test_a_larger_model_never_predicts_faster(
    gpu: str, extra_layers: int, width_factor: int, batch: int, ctx_len: int
) -> None:
    small = catalog.load_model("llama-3.1-8b")
    large = small.model_copy(
        update={
            "name": "larger",
            "num_layers": small.num_layers + extra_layers,
            "intermediate_size": small.intermediate_size * width_factor,
        }
    )
    g = catalog.load_gpu(gpu)
    cfg = EngineConfig()
    a, b = step_cost_model(small, g, cfg), step_cost_model(large, g, cfg)
    assert b.decode_step_s(batch, ctx_len) >= a.decode_step_s(batch, ctx_len)
    assert b.step_s(ctx_len, 1, 0, b.prefill_attn_s(ctx_len, 0)) >= a.step_s(
        ctx_len, 1, 0, a.prefill_attn_s(ctx_len, 0)
    )


def test_catalog_models_ordered_by_size_are_ordered_by_speed() -> None:
    g = catalog.load_gpu("h200-sxm")
    names = ["llama-3.2-1b", "llama-3.2-3b", "llama-3.1-8b", "llama-3.1-70b"]
    times = [step_cost_model(catalog.load_model(n), g, EngineConfig()).decode_step_s(8, 1024)
             for n in names]  # fmt: skip
    assert times == sorted(times)


def test_fp8_uses_tensor_cores_only_where_they_exist() -> None:
    hopper, ampere = catalog.load_gpu("h100-sxm"), catalog.load_gpu("a100-80gb-sxm")
    assert precision_for(Quantization.fp8, hopper, 4096).label == "fp8-w8a8"
    on_a100 = precision_for(Quantization.fp8, ampere, 4096)
    assert on_a100.weight_only and on_a100.gemm_tflops == ampere.fp16_tflops
    m = catalog.load_model("llama-3.1-8b")
    # Large-batch prefill: fp8 speeds Hopper's GEMMs up but slows Ampere's (dequantize + fp16 MMA).
    for gpu, faster in ((hopper, True), (ampere, False)):
        bf16 = step_cost_model(m, gpu, EngineConfig()).gemm_s(8192, 1)
        fp8 = step_cost_model(m, gpu, EngineConfig(quantization="fp8")).gemm_s(8192, 1)
        assert (fp8 < bf16) == faster


def test_int4_weight_only_is_fast_at_batch_one_and_pays_dequant_at_large_batch() -> None:
    g, m = catalog.load_gpu("a100-80gb-sxm"), catalog.load_model("llama-3.1-8b")
    bf16 = step_cost_model(m, g, EngineConfig())
    int4 = step_cost_model(m, g, EngineConfig(quantization="int4-awq"))
    assert int4.decode_step_s(1, 512) < 0.6 * bf16.decode_step_s(1, 512)
    assert int4.gemm_s(8192, 1) > bf16.gemm_s(8192, 1)


def test_moe_reads_only_the_experts_a_batch_touches() -> None:
    assert expected_experts_touched(8, 2, 1) == pytest.approx(2.0)
    assert expected_experts_touched(8, 2, 1000) == pytest.approx(8.0)
    assert 2 < expected_experts_touched(8, 2, 4) < 8
    g, m = catalog.load_gpu("h200-sxm"), catalog.load_model("mixtral-8x7b")
    cost = step_cost_model(m, g, EngineConfig())
    one, many = cost.decode_step_s(1, 128), cost.decode_step_s(64, 128)
    all_weights_s = weight_bytes_per_gpu(m, Quantization.bf16, g, 1) / (
        g.memory_bandwidth_gbps * 1e9 * DEFAULT_EFFICIENCY.weight_bandwidth_fraction
    )
    assert one < 0.5 * all_weights_s  # 2 of 8 experts: about 13 of 47 B parameters
    assert many > one


def test_tensor_parallel_pays_all_reduces_and_splits_weights() -> None:
    g, m = catalog.load_gpu("h100-sxm"), catalog.load_model("llama-3.1-70b")
    tp1 = step_cost_model(m, g, EngineConfig(tensor_parallel_size=1))
    tp4 = step_cost_model(m, g, EngineConfig(tensor_parallel_size=4))
    assert tp4.allreduces_per_step == 2 * m.num_layers and tp1.allreduces_per_step == 0
    assert tp4.decode_step_s(1, 512) < tp1.decode_step_s(1, 512)
    # ...but not 4x faster: the all-reduces and fixed costs do not shrink.
    assert tp4.decode_step_s(1, 512) > tp1.decode_step_s(1, 512) / 4


def test_efficiency_constants_stay_physically_plausible() -> None:
    with pytest.raises(ValueError, match="weight_bandwidth_fraction"):
        Efficiency(weight_bandwidth_fraction=0.97)
    with pytest.raises(ValueError, match="gemm_flops_fraction"):
        Efficiency(gemm_flops_fraction=0.9)
    assert DEFAULT_EFFICIENCY.weight_bandwidth_fraction <= 0.95
    assert DEFAULT_EFFICIENCY.gemm_flops_fraction <= 0.85


def test_plan_and_costs_agree_on_kv_bytes() -> None:
    g, m = catalog.load_gpu("h200-sxm"), catalog.load_model("llama-3.1-8b")
    cfg = EngineConfig(kv_dtype="fp8", tensor_parallel_size=2)
    assert (
        step_cost_model(m, g, cfg).kv_bytes_per_ctx
        == plan_memory(m, g, cfg, Workload()).kv_bytes_per_token
    )

"""The measured grouped-MoE GEMM grid (tuner/data/moe_gemm_efficiency.json) and its use."""

from __future__ import annotations

import json
import math
from importlib import resources

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tuner.catalog import load_gpu, load_model
from tuner.perf.costs import step_cost_model
from tuner.perf.moe_kernels import (
    GRID_FILE,
    expert_kernel_class,
    moe_gemm_grid,
    weight_only_class,
)
from tuner.specs import Engine, EngineConfig, MoEKernel, Quantization

pytestmark = pytest.mark.unit

DOC = json.loads(resources.files("tuner").joinpath("data", GRID_FILE).read_text())


def test_the_shipped_grid_says_where_it_comes_from_and_holds_fractions_of_a_roofline() -> None:
    assert "aiconfigurator-core" in DOC["source"] and "Apache-2.0" in DOC["source"]
    assert DOC["generated_by"].startswith("python scripts/distill_moe_kernels.py")
    assert set(DOC["efficiency"]) == {"vllm", "sglang", "trtllm"}
    for classes in DOC["efficiency"].values():
        for grid in classes.values():
            assert len(grid) == len(DOC["m_log2"])
            for row in grid:
                assert len(row) == len(DOC["n_log2"])
                assert all(0 < v <= 1 for v in row)  # nothing beats its roofline
            # never more efficient with more rows: a layer's time never falls with more tokens
            for lo, hi in zip(grid, grid[1:], strict=False):
                assert all(b <= a for a, b in zip(lo, hi, strict=True))
    assert all(0 < f < 1e-3 for f in DOC["floor_s"].values())


@pytest.mark.parametrize("gpu", ["h100-sxm", "h200-sxm", "b200", "gb200"])
def test_each_engine_has_a_grid_for_each_precision_on_a_covered_gpu(gpu: str) -> None:
    cc = load_gpu(gpu).compute_capability
    for engine in ("vllm", "sglang", "trtllm"):
        for cls in ("16", "8", "4", weight_only_class(True, cc), weight_only_class(False, cc)):
            assert moe_gemm_grid(engine, cls, gpu) is not None


def test_weight_only_kernels_are_measured_per_architecture() -> None:
    # Marlin's mma.sync reaches a quarter of Hopper's wgmma peak at large batches, while the
    # MXFP4 triton_kernels reach over half of it; on Ada (no wgmma) Marlin nears its peak share.
    def big(cls: str, gpu: str) -> float:
        grid = moe_gemm_grid("vllm", cls, gpu)
        assert grid is not None
        return grid.efficiency(2048, 2880)

    assert big("w@sm9", "h200-sxm") < 0.5 * big("wx@sm9", "h200-sxm")
    assert big("w@sm8", "l40s") > 1.5 * big("w@sm9", "h200-sxm")
    assert weight_only_class(True, 9.0) == "w@sm9" and weight_only_class(False, 10.3) == "wx@sm10"


def test_each_engine_runs_its_own_mxfp4_kernels_where_fp4_math_is_missing() -> None:
    # vllm 0.18.0 get_mxfp4_backend: triton_kernels on sm90-sm10x unless VLLM_MXFP4_USE_MARLIN,
    # Marlin below sm90 and on sm12x; int4 weight-only experts run Marlin everywhere.
    assert expert_kernel_class("w", True, "vllm", 9.0, marlin=False) == "wx@sm9"
    assert expert_kernel_class("w", True, "vllm", 9.0, marlin=True) == "w@sm9"
    assert expert_kernel_class("w", True, "vllm", 8.9, marlin=False) == "w@sm8"
    assert expert_kernel_class("w", True, "sglang", 9.0, marlin=False) == "wx@sm9"
    assert expert_kernel_class("w", False, "vllm", 9.0, marlin=False) == "w@sm9"
    assert expert_kernel_class("8", True, "vllm", 10.0, marlin=False) == "8"


def test_marlin_experts_prefill_slower_than_triton_kernels_on_hopper() -> None:
    model, gpu = load_model("gpt-oss-120b"), load_gpu("h200-sxm")
    cfg = EngineConfig(quantization=Quantization.mxfp4)
    triton = step_cost_model(model, gpu, cfg).moe
    marlin_cfg = cfg.model_copy(update={"moe_kernel": MoEKernel.marlin})
    marlin = step_cost_model(model, gpu, marlin_cfg).moe
    assert triton is not None and marlin is not None
    # a 8k-token prefill: the measured tables put Marlin near 190 TFLOPS, triton_kernels at 560
    assert marlin.time_s(8192) > 2.0 * triton.time_s(8192)
    assert "(Marlin) experts" in step_cost_model(model, gpu, marlin_cfg).kernel_path
    assert "Marlin" not in step_cost_model(model, gpu, cfg).kernel_path


@pytest.mark.parametrize("gpu", ["rtx-4090", "mi300x"])
def test_a_gpu_the_tables_do_not_cover_keeps_the_roofline(gpu: str) -> None:
    assert moe_gemm_grid("vllm", "16", gpu) is None
    cost = step_cost_model(load_model("mixtral-8x7b"), load_gpu(gpu), EngineConfig())
    assert cost.moe is not None and cost.moe.grid is None


def test_a_covered_gpu_prices_its_experts_with_the_engine_s_grid() -> None:
    model, gpu = load_model("deepseek-r1"), load_gpu("b200")
    cfg = EngineConfig(quantization=Quantization.fp8, tensor_parallel_size=8)
    costs = {
        e: step_cost_model(model, gpu, cfg.model_copy(update={"engine": e})).moe for e in Engine
    }
    assert all(c is not None and c.grid is not None for c in costs.values())
    # TP 8 slices DeepSeek's 2048-wide experts 256 wide; under EP they stay whole
    assert costs[Engine.vllm].expert_cols == 256  # type: ignore[union-attr]
    ep = step_cost_model(model, gpu, cfg.model_copy(update={"expert_parallel": True})).moe
    assert ep is not None and ep.expert_cols == 2048
    # a measured 8k-token prefill layer takes about 1.2-1.4 ms on B200 (SGLang, TRT-LLM):
    # 58 MoE layers, each above the floor and within 2x of that
    t = costs[Engine.sglang].time_s(8192)  # type: ignore[union-attr]
    assert 58 * 0.6e-3 < t < 58 * 2.8e-3


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(list(Engine)),
    st.sampled_from(["deepseek-r1", "mixtral-8x7b", "qwen3-30b-a3b"]),
    st.sampled_from([1, 2, 4, 8]),
    st.booleans(),
    st.floats(1, 32768),
    st.floats(1, 32768),
)
def test_the_measured_experts_never_take_less_time_for_more_tokens(
    engine: Engine, name: str, tp: int, ep: bool, a: float, b: float
) -> None:
    model = load_model(name)
    cfg = EngineConfig(tensor_parallel_size=tp, expert_parallel=ep, engine=engine)
    moe = step_cost_model(model, load_gpu("h200-sxm"), cfg).moe
    assert moe is not None and moe.grid is not None
    lo, hi = sorted((a, b))
    assert moe.time_s(lo) <= moe.time_s(hi) * (1 + 1e-9)


def test_grid_interpolation_stays_inside_its_cells() -> None:
    grid = moe_gemm_grid("trtllm", "8", "b200")
    assert grid is not None
    for m in (1, 3, 100, 5000, 1e6):
        for n in (32, 256, 700, 1e5):
            v = grid.efficiency(m, n)
            assert min(min(r) for r in grid.values) - 1e-12 <= v <= max(max(r) for r in grid.values)
            assert math.isfinite(v)


def test_sglang_on_sm100_runs_tensorrt_llms_fp8_and_fp4_moe_kernels() -> None:
    from tuner.perf.moe_kernels import moe_kernel_engine

    # sglang 0.5.9 ServerArgs: moe_runner_backend flashinfer_trtllm on sm100 for fp8/fp4 experts.
    for cls in ("8", "4"):
        for gpu in ("b200", "b300", "gb200", "gb300"):
            assert moe_kernel_engine("sglang", cls, load_gpu(gpu).compute_capability) == "trtllm"
    assert moe_kernel_engine("sglang", "16", 10.0) == "sglang"  # bf16 experts: its own kernels
    assert moe_kernel_engine("sglang", "8", 9.0) == "sglang"  # Hopper
    assert moe_kernel_engine("sglang", "4", 12.0) == "sglang"  # RTX PRO 6000 is sm120
    assert moe_kernel_engine("vllm", "8", 10.0) == "vllm"

"""The calibration fit recovers constants from data the simulator generated itself."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from tuner.calibrate.fit import fit_efficiency
from tuner.calibrate.refit import Observation, refit_profile
from tuner.calibrate.steps import StepSample, predict_step_seconds
from tuner.catalog import load_gpu, load_model
from tuner.perf.efficiency import DEFAULT_EFFICIENCY, efficiency_of
from tuner.perf.predict import predict_metrics
from tuner.specs import SLA, Context, EngineConfig, Workload

pytestmark = pytest.mark.unit

# Known constants, each well away from its default, that the synthetic data are generated with.
TRUE = replace(
    DEFAULT_EFFICIENCY,
    weight_bandwidth_fraction=0.55,
    kv_bandwidth_fraction=0.45,
    gemm_flops_fraction=0.5,
    attention_flops_fraction=0.3,
    step_overhead_s=0.002,
    seq_step_overhead_s=4e-5,
)
# Every constant of TRUE moves a term these steps exercise: small and large decode batches at
# short and long context (weights, KV, per-sequence host work), and prefill chunks up to 4k
# tokens after up to 4k cached ones (GEMM and attention FLOPs).
GRID = [
    StepSample(kind="decode_step", batch=b, decode_ctx=c)
    for b in (1, 4, 16, 64, 256)
    for c in (64, 1024, 8192)
] + [
    StepSample(kind="prefill_step", chunk=n, ctx_before=p, logits=1)
    for n in (16, 256, 1024, 4096)
    for p in (0, 4096)
]


def _step_fit(start_scale: float, noise: float = 0.0):
    gpu, model, cfg = load_gpu("h100-sxm"), load_model("llama-3.1-8b"), EngineConfig()
    measured = predict_step_seconds(GRID, model, gpu, cfg, TRUE)
    rng = np.random.default_rng(0)
    measured = measured * np.exp(rng.normal(0.0, noise, measured.size))
    # A perturbed start: every fitted constant off by the same factor (fractions stay in bounds).
    start = replace(
        DEFAULT_EFFICIENCY,
        **{
            n: getattr(TRUE, n) * start_scale
            for n in (
                "weight_bandwidth_fraction",
                "kv_bandwidth_fraction",
                "gemm_flops_fraction",
                "attention_flops_fraction",
                "step_overhead_s",
                "seq_step_overhead_s",
            )
        },
    )

    def predict(eff):
        return predict_step_seconds(GRID, model, gpu, cfg, eff)

    return fit_efficiency(predict, measured, [s.kind for s in GRID], start)


@pytest.mark.parametrize("start_scale", [0.6, 1.5])
def test_step_fit_recovers_the_constants_it_was_generated_with(start_scale: float) -> None:
    result = _step_fit(start_scale)
    for name in (
        "weight_bandwidth_fraction",
        "kv_bandwidth_fraction",
        "gemm_flops_fraction",
        "attention_flops_fraction",
        "step_overhead_s",
        "seq_step_overhead_s",
    ):
        assert result.fitted[name] == pytest.approx(getattr(TRUE, name), rel=1e-3), name
    # Per-layer overhead only moves predictions the way per-step overhead does (one model),
    # and request overhead not at all: both stay at their start values, unfitted.
    assert "layer_overhead_s" not in result.fitted
    assert "request_overhead_s" not in result.fitted
    assert result.efficiency.request_overhead_s == DEFAULT_EFFICIENCY.request_overhead_s
    assert set(result.residuals) == {"decode_step", "prefill_step"}
    assert all(r.p90_abs_rel_error < 1e-4 for r in result.residuals.values())


def test_step_fit_with_noise_stays_near_the_truth_and_reports_the_noise() -> None:
    result = _step_fit(0.7, noise=0.05)
    for name in ("weight_bandwidth_fraction", "kv_bandwidth_fraction", "gemm_flops_fraction"):
        assert result.fitted[name] == pytest.approx(getattr(TRUE, name), rel=0.15), name
    # What matters downstream: the fitted constants predict the noise-free step times closely.
    gpu, model, cfg = load_gpu("h100-sxm"), load_model("llama-3.1-8b"), EngineConfig()
    fitted = predict_step_seconds(GRID, model, gpu, cfg, result.efficiency)
    truth = predict_step_seconds(GRID, model, gpu, cfg, TRUE)
    assert float(np.median(np.abs(fitted / truth - 1))) < 0.03
    # 5% log-normal noise: the median residual is about 0.67 sigma, neither 0 nor inflated.
    median = result.residuals["decode_step"].median_abs_rel_error
    assert 0.01 < median < 0.08


def _observations(gpu, model):
    obs = []
    for isl, users in [(128, 1), (2048, 1), (512, 8), (512, 32)]:
        wl = Workload(input_tokens=isl, output_tokens=64, concurrency=users, num_requests=4 * users)
        ctx = Context(model=model, gpu=gpu, sla=SLA(), workload=wl)
        truth = replace(TRUE, request_overhead_s=0.02)
        obs.append(
            Observation(
                config=EngineConfig(),
                workload=wl,
                measured=predict_metrics(EngineConfig(), ctx, truth),
            )
        )
    return obs


def test_refit_moves_predictions_onto_the_observed_runs() -> None:
    gpu, model = load_gpu("h100-sxm"), load_model("llama-3.1-8b")
    obs = _observations(gpu, model)
    refitted = refit_profile(gpu, model, obs)
    cal = refitted.calibration
    assert cal is not None and cal.refits == 1 and set(cal.residuals) == {"ttft", "tpot"}
    assert cal.residuals["ttft"].median_abs_rel_error < 0.05
    assert cal.residuals["tpot"].median_abs_rel_error < 0.05
    # The datasheet profile missed by more, and the refitted one predicts through --gpu alone.
    ctx = Context(model=model, gpu=refitted, sla=SLA(), workload=obs[0].workload)
    before = predict_metrics(EngineConfig(), ctx.model_copy(update={"gpu": gpu}))
    after = predict_metrics(EngineConfig(), ctx)
    measured = obs[0].measured.ttft_ms.p50
    assert abs(after.ttft_ms.p50 / measured - 1) < abs(before.ttft_ms.p50 / measured - 1)
    # Interconnect and memory constants are not touched by single-GPU latency runs.
    assert efficiency_of(cal).interconnect_fraction == DEFAULT_EFFICIENCY.interconnect_fraction
    again = refit_profile(refitted, model, obs)
    assert again.calibration is not None and again.calibration.refits == 2
